"""`check_rail`: the conformance checks every rail plugin must pass.

A rail's own tests implement `RailHarness` over a real local chain (LiteSVM,
eth-tester, ...) and call::

    await check_rail(make_harness)            # every check, in order
    await run_check("tx_failed", harness)     # or one check (for pytest parametrize)

The kit only speaks the `Rail` interface plus the harness's knobs for what the
interface cannot express (a transaction that landed but failed, one that is seen but
not yet final, a chain that cannot be reached). Each check uses fresh recipient
wallets, so one harness can serve every check. A failed check raises AssertionError
naming the check.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from envelopay.errors import RailError
from envelopay.protocol.codes import OopsCode
from envelopay.rails.binding import BindingRail, statement
from envelopay.rails.interface import AddressSyntax, Expectation, Rail, Reason, Verdict


class RailHarness(Protocol):
    """What a rail's tests provide to the kit. Amounts are smallest units."""

    @property
    def rail(self) -> Rail:
        """The rail under test, bound to the local chain, paying from a funded key."""
        ...

    @property
    def chain(self) -> str:
        """The chain name `rail` serves (e.g. "solana-local")."""
        ...

    @property
    def payer(self) -> str:
        """The wallet address `rail.pay` pays from."""
        ...

    @property
    def native(self) -> str:
        """Symbol of the chain's native asset (e.g. "SOL", "ETH")."""
        ...

    @property
    def tokens(self) -> Sequence[str]:
        """Token symbols to exercise (at least one); the payer holds enough of each."""
        ...

    def amount(self, token: str) -> int:
        """A sensible payment amount for `token` (the payer can afford several)."""
        ...

    def new_wallet(self) -> str:
        """A fresh recipient address nobody has paid yet."""
        ...

    async def failed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        """Proof of a transaction that landed on chain but failed (reverted / meta.err)."""
        ...

    async def unconfirmed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        """Proof of a correct payment that is seen but has not reached the default finality."""
        ...

    async def make_final(self, proof: dict[str, Any]) -> None:
        """Bring a payment from `unconfirmed_payment` to the default finality."""
        ...

    def unknown_proof(self) -> dict[str, Any]:
        """A well-formed proof of a transaction that does not exist."""
        ...

    def malformed_proofs(self) -> Sequence[dict[str, Any]]:
        """Rail-specific malformed proofs (wrong length, bad alphabet...)."""
        ...

    def proof_spellings(self, proof: dict[str, Any]) -> Sequence[dict[str, Any]]:
        """Other spellings of the same proof that must share its proof_key."""
        ...

    def unavailable_rail(self) -> Rail:
        """The same rail configuration, but its chain cannot be reached."""
        ...


HarnessFactory = Callable[[], "RailHarness | Awaitable[RailHarness]"]
Check = Callable[[RailHarness], Awaitable[None]]

GENERIC_MALFORMED: tuple[dict[str, Any], ...] = (
    {},
    {"tx": None},
    {"tx": 12345},
    {"tx": ""},
    {"tx": ["a"]},
    {"tx": "not a transaction id!"},
    {"tx": "\u0665" * 64},
)


def _expect(h: RailHarness, token: str, amount: int, recipient: str, **kw: Any) -> Expectation:
    return Expectation(chain=h.chain, token=token, amount=amount, recipient=recipient, **kw)


def _assert_ok(name: str, v: Verdict, amount: int) -> None:
    assert v.status == "ok", f"{name}: expected ok, got {v.status} {v.reason} {v.detail}"
    assert v.observed_amount == amount, f"{name}: observed {v.observed_amount}, paid {amount}"
    assert v.oops is None, f"{name}: an ok verdict has no OOPS code"


def _assert_rejected(name: str, v: Verdict, reason: Reason) -> None:
    assert v.status == "rejected", f"{name}: expected rejected {reason}, got {v.status} {v.reason} {v.detail}"
    assert v.reason == reason, f"{name}: expected {reason}, got {v.reason} ({v.detail})"
    assert isinstance(v.oops, OopsCode), f"{name}: a rejection maps to an OOPS code"


async def _pay(h: RailHarness, token: str, amount: int, recipient: str) -> dict[str, Any]:
    return await h.rail.pay(chain=h.chain, token=token, amount=amount, recipient=recipient)


# -- the checks ---------------------------------------------------------------------------


async def check_happy_path(h: RailHarness) -> None:
    """Each asset kind: pay, then verify exact amount, recipient, payer and time."""
    for token in (h.native, *h.tokens):
        to, amount = h.new_wallet(), h.amount(token)
        proof = await _pay(h, token, amount, to)
        v = await h.rail.verify(proof, _expect(h, token, amount, to))
        _assert_ok(f"happy_path[{token}]", v, amount)
        assert v.payer == h.payer, f"happy_path[{token}]: payer {v.payer}, expected {h.payer}"
        assert v.tx_time is not None and v.tx_time.tzinfo is not None, f"happy_path[{token}]: aware tx_time"
        assert v.proof_key == h.rail.proof_key(proof), f"happy_path[{token}]: verdict carries the proof_key"
        json_doc = v.to_json()
        assert json_doc["status"] == "ok" and json_doc["observed_amount"] == str(amount)


async def check_amount_policy(h: RailHarness) -> None:
    """Exact rejects over- and under-payment; at_least accepts over-payment only."""
    for token in (h.native, h.tokens[0]):
        to, amount = h.new_wallet(), h.amount(token)
        proof = await _pay(h, token, amount + 1, to)
        over = await h.rail.verify(proof, _expect(h, token, amount, to))
        _assert_rejected("amount[exact,over]", over, Reason.AMOUNT_MISMATCH)
        # The verdict carries what was paid, as its detail says (it was null in the JSON).
        assert over.observed_amount == amount + 1, f"amount[exact,over]: {over.observed_amount}"
        assert over.to_json()["observed_amount"] == str(amount + 1)
        v = await h.rail.verify(proof, _expect(h, token, amount, to, amount_policy="at_least"))
        _assert_ok("amount[at_least,over]", v, amount + 1)
        under = await _pay(h, token, amount - 1, to)
        for policy in ("exact", "at_least"):
            short = await h.rail.verify(under, _expect(h, token, amount, to, amount_policy=policy))
            _assert_rejected(f"amount[{policy},under]", short, Reason.AMOUNT_MISMATCH)
            assert short.observed_amount == amount - 1, f"amount[{policy},under]: {short.observed_amount}"


async def check_recipient_mismatch(h: RailHarness) -> None:
    for token in (h.native, h.tokens[0]):
        paid, claimed, amount = h.new_wallet(), h.new_wallet(), h.amount(token)
        proof = await _pay(h, token, amount, paid)
        v = await h.rail.verify(proof, _expect(h, token, amount, claimed))
        _assert_rejected(f"recipient[{token}]", v, Reason.RECIPIENT_MISMATCH)


async def check_token_mismatch(h: RailHarness) -> None:
    """Native paid where a token is due, a token where native is due, token A for B."""
    native_amt, token = h.amount(h.native), h.tokens[0]
    to = h.new_wallet()
    proof = await _pay(h, h.native, native_amt, to)
    _assert_rejected("token[native for token]", await h.rail.verify(proof, _expect(h, token, native_amt, to)),
                     Reason.TOKEN_MISMATCH)
    tok_amt = h.amount(token)
    proof = await _pay(h, token, tok_amt, to)
    _assert_rejected("token[token for native]", await h.rail.verify(proof, _expect(h, h.native, tok_amt, to)),
                     Reason.TOKEN_MISMATCH)
    if len(h.tokens) > 1:
        _assert_rejected("token[A for B]", await h.rail.verify(proof, _expect(h, h.tokens[1], tok_amt, to)),
                         Reason.TOKEN_MISMATCH)


async def check_unsupported_asset_and_chain(h: RailHarness) -> None:
    to, amount = h.new_wallet(), h.amount(h.native)
    proof = await _pay(h, h.native, amount, to)
    _assert_rejected("unsupported_asset", await h.rail.verify(proof, _expect(h, "NO-SUCH-TOKEN", amount, to)),
                     Reason.UNSUPPORTED_ASSET)
    wrong_chain = replace(_expect(h, h.native, amount, to), chain="no-such-chain")
    _assert_rejected("chain_mismatch", await h.rail.verify(proof, wrong_chain), Reason.CHAIN_MISMATCH)
    assert h.chain in h.rail.chains, "the harness's chain is one the rail serves"


async def check_payer_binding(h: RailHarness) -> None:
    for token in (h.native, h.tokens[0]):
        to, amount = h.new_wallet(), h.amount(token)
        proof = await _pay(h, token, amount, to)
        v = await h.rail.verify(proof, _expect(h, token, amount, to, payer=h.payer))
        _assert_ok("payer[match]", v, amount)
        assert v.payer == h.payer
        _assert_rejected("payer[other]",
                         await h.rail.verify(proof, _expect(h, token, amount, to, payer=h.new_wallet())),
                         Reason.PAYER_MISMATCH)


async def check_payer_sig(h: RailHarness) -> None:
    """The binding (envelopay.rails.binding): the paying key signs a statement naming the
    presentation; the rail accepts that signature for its wallet only, and nothing else."""
    rail = h.rail
    assert isinstance(rail, BindingRail), "payer_sig: the rail signs and checks bindings"
    to, amount = h.new_wallet(), h.amount(h.native)
    proof = await _pay(h, h.native, amount, to)
    said = statement(payee="w@example.test", payer="b@example.test", message_id="pay_1",
                     chain=h.chain, tx=rail.proof_key(proof))
    signed = rail.sign_statement(said)
    assert signed is not None, "payer_sig: a rail with a paying key signs"
    wallet, sig = signed
    assert rail.check_payer_sig(wallet, said, sig), "payer_sig: our own signature checks"
    v = await rail.verify(proof, _expect(h, h.native, amount, to, payer=wallet))
    _assert_ok("payer_sig[payer is the transfer's authority]", v, amount)
    other = said.replace(b"payer:b@", b"payer:m@")
    assert not rail.check_payer_sig(wallet, other, sig), "payer_sig: another statement fails"
    assert not rail.check_payer_sig(h.new_wallet(), said, sig), "payer_sig: another wallet fails"
    for junk in ("", "zz", sig[:-4], "0x" + "00" * 65, "\udcff"):
        assert not rail.check_payer_sig(wallet, said, junk), f"payer_sig: junk {junk[:12]!r} fails"
    assert not rail.check_payer_sig("not a wallet", said, sig), "payer_sig: a junk wallet fails"


async def check_freshness(h: RailHarness) -> None:
    to, amount = h.new_wallet(), h.amount(h.native)
    proof = await _pay(h, h.native, amount, to)
    ok = await h.rail.verify(proof, _expect(h, h.native, amount, to))
    _assert_ok("fresh[no window]", ok, amount)
    assert ok.tx_time is not None
    t = ok.tx_time
    margin = timedelta(minutes=5)
    inside = _expect(h, h.native, amount, to, not_before=t - margin, not_after=t + margin)
    _assert_ok("fresh[inside]", await h.rail.verify(proof, inside), amount)
    early = _expect(h, h.native, amount, to, not_before=t + timedelta(seconds=1))
    _assert_rejected("fresh[before window]", await h.rail.verify(proof, early), Reason.STALE)
    late = _expect(h, h.native, amount, to, not_after=t - timedelta(seconds=1))
    _assert_rejected("fresh[after window]", await h.rail.verify(proof, late), Reason.STALE)
    ancient = _expect(h, h.native, amount, to, not_after=datetime(2001, 1, 1, tzinfo=UTC))
    _assert_rejected("fresh[ancient window]", await h.rail.verify(proof, ancient), Reason.STALE)


async def check_tx_failed(h: RailHarness) -> None:
    for token in (h.native, h.tokens[0]):
        to, amount = h.new_wallet(), h.amount(token)
        proof = await h.failed_payment(token, amount, to)
        _assert_rejected(f"tx_failed[{token}]", await h.rail.verify(proof, _expect(h, token, amount, to)),
                         Reason.TX_FAILED)


async def check_tx_not_found(h: RailHarness) -> None:
    to = h.new_wallet()
    v = await h.rail.verify(h.unknown_proof(), _expect(h, h.native, h.amount(h.native), to))
    _assert_rejected("tx_not_found", v, Reason.TX_NOT_FOUND)
    assert v.oops == OopsCode.TX_NOT_FOUND


async def check_malformed_proof(h: RailHarness) -> None:
    to = h.new_wallet()
    for bad in (*GENERIC_MALFORMED, *h.malformed_proofs()):
        try:
            h.rail.proof_key(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"malformed: proof_key({bad!r}) must raise ValueError")
        v = await h.rail.verify(bad, _expect(h, h.native, h.amount(h.native), to))
        _assert_rejected(f"malformed[{bad!r}]", v, Reason.MALFORMED_PROOF)


async def check_pending_then_final(h: RailHarness) -> None:
    for token in (h.native, h.tokens[0]):
        to, amount = h.new_wallet(), h.amount(token)
        proof = await h.unconfirmed_payment(token, amount, to)
        v = await h.rail.verify(proof, _expect(h, token, amount, to))
        assert v.status == "pending", f"pending[{token}]: got {v.status} {v.reason} {v.detail}"
        assert v.reason == Reason.NOT_FINAL and v.oops == OopsCode.NOT_FINAL
        await h.make_final(proof)
        _assert_ok(f"final[{token}]", await h.rail.verify(proof, _expect(h, token, amount, to)), amount)


async def check_unavailable(h: RailHarness) -> None:
    to, amount = h.new_wallet(), h.amount(h.native)
    proof = await _pay(h, h.native, amount, to)
    down = h.unavailable_rail()
    v = await down.verify(proof, _expect(h, h.native, amount, to))
    assert v.status == "unavailable", f"unavailable: got {v.status} {v.reason} {v.detail}"
    assert v.reason == Reason.RPC_UNAVAILABLE and v.oops == OopsCode.RAIL_UNAVAILABLE
    closer = getattr(down, "aclose", None)
    if closer is not None:
        result = closer()
        if inspect.isawaitable(result):
            await result


async def check_proof_key(h: RailHarness) -> None:
    """One key per transaction whatever the spelling; distinct payments, distinct keys."""
    to, amount = h.new_wallet(), h.amount(h.native)
    first = await _pay(h, h.native, amount, to)
    second = await _pay(h, h.native, amount, to)  # identical payment, new transaction
    key = h.rail.proof_key(first)
    assert isinstance(key, str) and key, "proof_key: a non-empty string"
    assert key == h.rail.proof_key(dict(first)), "proof_key: deterministic"
    assert key != h.rail.proof_key(second), "proof_key: two transactions, two keys"
    spellings = h.proof_spellings(first)
    assert spellings, "proof_key: the harness gives at least one other spelling"
    for alt in spellings:
        assert h.rail.proof_key(alt) == key, f"proof_key: {alt!r} must map to {key!r}"
        v = await h.rail.verify(alt, _expect(h, h.native, amount, to))
        _assert_ok(f"proof_key[verify {alt!r}]", v, amount)
        assert v.proof_key == key


async def check_insufficient_funds(h: RailHarness) -> None:
    # More than the payer holds, yet no more than one transfer carries: past the rail's
    # max_amount (u64 on Solana) the amount is the caller's mistake, not a short wallet.
    rail = h.rail
    amount = min(10**30, rail.max_amount(h.chain)) if isinstance(rail, AddressSyntax) else 10**30
    for token in (h.native, h.tokens[0]):
        try:
            await _pay(h, token, amount, h.new_wallet())
        except RailError as exc:
            assert exc.reason == "insufficient_funds", f"insufficient[{token}]: reason {exc.reason}"
        else:
            raise AssertionError(f"insufficient[{token}]: paying {amount} must raise RailError")


RAIL_CHECKS: dict[str, Check] = {
    "happy_path": check_happy_path,
    "amount_policy": check_amount_policy,
    "recipient_mismatch": check_recipient_mismatch,
    "token_mismatch": check_token_mismatch,
    "unsupported_asset_and_chain": check_unsupported_asset_and_chain,
    "payer_binding": check_payer_binding,
    "payer_sig": check_payer_sig,
    "freshness": check_freshness,
    "tx_failed": check_tx_failed,
    "tx_not_found": check_tx_not_found,
    "malformed_proof": check_malformed_proof,
    "pending_then_final": check_pending_then_final,
    "unavailable": check_unavailable,
    "proof_key": check_proof_key,
    "insufficient_funds": check_insufficient_funds,
}


async def run_check(name: str, harness: RailHarness) -> None:
    """Run one named check from RAIL_CHECKS."""
    await RAIL_CHECKS[name](harness)


async def check_rail(factory: HarnessFactory, *, only: Sequence[str] | None = None) -> list[str]:
    """Run the conformance checks (all, or `only`) against one harness; return the names run."""
    made = factory()
    harness: RailHarness = await made if inspect.isawaitable(made) else made
    assert isinstance(harness.rail, Rail), "the harness's rail implements the Rail protocol"
    names = list(only) if only is not None else list(RAIL_CHECKS)
    for name in names:
        await run_check(name, harness)
    return names
