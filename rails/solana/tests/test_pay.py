"""pay() on both backends: the recipient's token account is created when missing, tiny
SOL payments to new accounts are refused up front, caller mistakes are UsageError."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.errors import ConfigError, RailError, UsageError
from envelopay.rails.interface import Expectation
from envelopay.testing.node_faults import Handler, fails_first, hangs_up_after
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.rail import RENT_EXEMPT_MINIMUM, SolanaRail
from envelopay_solana.tx import ata


@pytest.fixture(params=["local", "rpc"])
async def setup(request: pytest.FixtureRequest) -> AsyncIterator[tuple[LocalSolana, SolanaRail, Keypair]]:
    chain = LocalSolana()
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9, "PYUSD": 10**9})
    if request.param == "local":
        yield chain, make_rail({"local_chain": chain, "keypair": bytes(payer)}), payer
        return
    async with JsonRpcServer(solana_rpc_handler(chain)) as node:
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url, "keypair": bytes(payer),
                          "poll_interval": 0.01})
        yield chain, rail, payer
        await rail.aclose()


@pytest.mark.parametrize("token", ["USDC", "PYUSD"])
async def test_token_payment_creates_the_recipients_account_once(
    setup: tuple[LocalSolana, SolanaRail, Keypair], token: str
) -> None:
    chain, rail, _ = setup
    to = Keypair().pubkey()
    asset = rail.asset("solana-local", token)
    assert asset is not None
    assert chain.token_balance(ata(to, asset)) is None
    for expected in (700_000, 1_400_000):  # the second payment finds the account in place
        proof = await rail.pay(chain="solana-local", token=token, amount=700_000, recipient=str(to))
        assert chain.token_balance(ata(to, asset)) == expected
        verdict = await rail.verify(proof, Expectation("solana-local", token, 700_000, str(to)))
        assert verdict.ok


async def test_tiny_sol_to_a_new_account_is_refused_before_paying(
    setup: tuple[LocalSolana, SolanaRail, Keypair],
) -> None:
    chain, rail, payer = setup
    before = chain.balance(payer.pubkey())
    fresh = str(Keypair().pubkey())
    with pytest.raises(UsageError, match="rent-exempt"):
        await rail.pay(chain="solana-local", token="SOL", amount=RENT_EXEMPT_MINIMUM - 1, recipient=fresh)
    assert chain.balance(payer.pubkey()) == before  # no fee spent
    funded = chain.new_wallet(sol=10**9)
    proof = await rail.pay(chain="solana-local", token="SOL", amount=1_000, recipient=str(funded.pubkey()))
    assert chain.balance(funded.pubkey()) == 10**9 + 1_000
    assert (await rail.verify(proof, Expectation("solana-local", "SOL", 1_000, str(funded.pubkey())))).ok


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"chain": "solana"}, "pays on solana-local"),
    ({"token": "DAI"}, "unknown token"),
    ({"recipient": "0x1234"}, "not a Solana address"),
    ({"amount": 0}, "positive"),
])
async def test_caller_mistakes_are_usage_errors(
    setup: tuple[LocalSolana, SolanaRail, Keypair], kwargs: dict[str, Any], message: str
) -> None:
    _, rail, _ = setup
    args: dict[str, Any] = {"chain": "solana-local", "token": "SOL", "amount": 10**6,
                            "recipient": str(Pubkey.new_unique()), **kwargs}
    with pytest.raises(UsageError, match=message):
        await rail.pay(**args)


async def test_pay_without_a_keypair_is_a_config_error() -> None:
    rail = make_rail({})
    with pytest.raises(ConfigError, match="keypair"):
        await rail.pay(chain="solana-local", token="SOL", amount=10**6, recipient=str(Pubkey.new_unique()))


async def test_concurrent_payments_from_one_wallet_are_distinct_transactions(
    setup: tuple[LocalSolana, SolanaRail, Keypair],
) -> None:
    # Over RPC each payment asks the node for a blockhash, then sends: eight at once
    # from one wallet must not sign against one blockhash (identical transactions; the
    # dev node turns its blockhash per transaction and would refuse all but one).
    import asyncio

    chain, rail, _ = setup
    to = Keypair().pubkey()
    asset = rail.asset("solana-local", "USDC")
    assert asset is not None
    proofs = await asyncio.gather(*(
        rail.pay(chain="solana-local", token="USDC", amount=250_000, recipient=str(to)) for _ in range(8)))
    assert len({p["tx"] for p in proofs}) == 8
    assert chain.token_balance(ata(to, asset)) == 8 * 250_000
    for proof in proofs:
        assert (await rail.verify(proof, Expectation("solana-local", "USDC", 250_000, str(to)))).ok


async def test_a_payment_over_rpc_is_two_round_trips_when_the_node_confirms_at_once() -> None:
    # The checks travel with the blockhash, and the first status with the send: a node
    # that answers a batch in order (the dev node) confirms in the send's own answer.
    chain = LocalSolana()
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    methods: list[str] = []
    handle = solana_rpc_handler(chain)

    def counted(method: str, params: list[Any]) -> Any:
        methods.append(method)
        return handle(method, params)

    async with JsonRpcServer(counted) as node:
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url, "keypair": bytes(payer)})
        proof = await rail.pay(chain="solana-local", token="USDC", amount=500_000,
                               recipient=str(Keypair().pubkey()))
        await rail.aclose()
        assert node.requests == 2, methods
    assert methods == ["getBalance", "getTokenAccountBalance", "getAccountInfo", "getLatestBlockhash",
                       "sendTransaction", "getSignatureStatuses"]
    assert chain.lookup(proof["tx"])[0] is not None


async def _pay_through(wrap: Callable[[Handler], Handler], **options: Any) -> tuple[Any, LocalSolana, Pubkey]:
    """One payment of 0.5 USDC on a dev node whose handler `wrap` wraps: (pay()'s proof,
    or the RailError it raised; the chain; the recipient)."""
    chain = LocalSolana()
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    to = Keypair().pubkey()
    async with JsonRpcServer(wrap(solana_rpc_handler(chain))) as node:
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url, "keypair": bytes(payer),
                          "poll_interval": 0.01, **options})
        try:
            got: Any = await rail.pay(chain="solana-local", token="USDC", amount=500_000, recipient=str(to))
        except RailError as exc:
            got = exc
        await rail.aclose()
    return got, chain, to


def _received(chain: LocalSolana, to: Pubkey) -> int:
    asset = make_rail({"local_chain": chain}).asset("solana-local", "USDC")
    assert asset is not None
    return chain.token_balance(ata(to, asset)) or 0


@pytest.mark.parametrize("failing", [1, 3])
async def test_status_errors_after_the_send_are_asked_again(failing: int) -> None:
    # The send went through; the look beside it (1) or that and the next two polls (3)
    # failed. The transaction is out, so pay() keeps asking and returns its proof once it
    # is confirmed: raising would read as a failed payment, and the payer would pay again.
    looks: list[str] = []
    proof, chain, to = await _pay_through(fails_first("getSignatureStatuses", failing, looks))
    assert isinstance(proof, dict), proof
    assert len(looks) == failing + 1
    assert _received(chain, to) == 500_000  # once
    assert chain.lookup(proof["tx"])[0] is not None


async def test_a_send_the_node_never_answers_names_the_transaction_that_may_land() -> None:
    # The node takes the transaction and drops the connection before answering. The
    # payment did not fail: pay() says not_final and hands back the proof (`sent`), so no
    # caller takes it for money that stayed; and the money did move, once.
    got, chain, to = await _pay_through(hangs_up_after("sendTransaction"))
    assert isinstance(got, RailError) and got.reason == "not_final" and got.sent is not None, got
    assert _received(chain, to) == 500_000
    assert chain.lookup(got.sent["tx"])[0] is not None


async def test_a_payment_not_confirmed_in_time_names_its_transaction() -> None:
    def unseen(handle: Handler) -> Handler:
        def answer(method: str, params: list[Any]) -> Any:
            if method == "getSignatureStatuses":
                return {"context": {"slot": 1}, "value": [None]}
            return handle(method, params)
        return answer

    got, chain, _ = await _pay_through(unseen, confirm_timeout=0.05)
    assert isinstance(got, RailError) and got.reason == "not_final" and got.sent is not None, got
    assert chain.lookup(got.sent["tx"])[0] is not None


async def test_a_node_lost_before_the_send_is_a_payment_that_did_not_leave() -> None:
    # The node hangs up on the balance checks: nothing was signed or sent. A RailError
    # (every payer catches it) with no `sent`: the caller may try again.
    got, chain, to = await _pay_through(hangs_up_after("getBalance"))
    assert isinstance(got, RailError) and got.reason == "rpc_unavailable" and got.sent is None, got
    assert _received(chain, to) == 0


async def test_a_node_acknowledging_another_signature_is_not_believed() -> None:
    def liar(handle: Handler) -> Handler:
        def answer(method: str, params: list[Any]) -> Any:
            result = handle(method, params)
            return "1" * 88 if method == "sendTransaction" else result
        return answer

    got, chain, to = await _pay_through(liar)
    assert isinstance(got, RailError) and got.reason == "not_final" and got.sent is not None, got
    assert _received(chain, to) == 500_000  # ours landed, once
