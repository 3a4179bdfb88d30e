"""The worker's answer to an exchange WHICH, and the client's reading of it (SPEC.md
"Client checks before paying"): through the real path of the demo demo_world (garden, DKIM,
SQLite ledger; the demo worker trades SOL on solana-local for USDC on base-local)."""

from __future__ import annotations

from envelopay.client.demo import DemoWorld
from envelopay.client.preflight import accepts_pair, exchange_query
from envelopay.protocol.messages import Methods, Which

GIVE, WANT = "solana-local/SOL", "base-local/USDC"


async def test_a_traded_pair_is_answered_with_its_rail_and_wallet(demo_world: DemoWorld) -> None:
    _, reply, _ = await demo_world.exchange(Which(id="wx1", task=exchange_query(GIVE, WANT)))
    assert isinstance(reply, Methods)
    rail = accepts_pair(reply.model_dump(mode="json"), GIVE, WANT)
    assert rail is not None and rail["wallet"] == demo_world.wallets["worker_sol"]


async def test_an_untraded_pair_is_not_a_yes(demo_world: DemoWorld) -> None:
    _, reply, _ = await demo_world.exchange(Which(id="wx2", task=exchange_query(WANT, GIVE)))
    assert isinstance(reply, Methods) and reply.note is not None and reply.note.startswith("no exchange")
    assert accepts_pair(reply.model_dump(mode="json"), WANT, GIVE) is None
    # An ordinary METHODS listing the give asset is not a yes either.
    _, plain, _ = await demo_world.exchange(Which(id="wx3"))
    assert isinstance(plain, Methods)
    assert accepts_pair(plain.model_dump(mode="json"), "solana-local/USDC", WANT) is None
