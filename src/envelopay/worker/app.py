"""The paid worker's decisions: what the engine asks, what the worker answers.

The engine (envelopay.engine) runs the inbound path — DKIM, parse, claim,
replay reservation, flow step, proof verification, ledger commit — and asks this
`Application` only for business decisions, each answered with data:

    WHICH   → METHODS: accepted rails with wallet and indicative price (the price of
              the described task when the WHICH names one)
    ORDER   → INVOICE (priced task), FULFILL (free task, or a v0.2 prepaid ORDER
              whose proof the engine verified), or OOPS unknown_task / invalid_field
    PAY     → (proof verified by the engine against the open INVOICE) FULFILL with
              the declared handler's result
    OFFER   → (give proof verified by the engine) pay the counter-asset on its rail
              and ACCEPT with that proof, or OOPS when the pair or rate is refused

A task names a declared operation and supplies data fields::

    {"name": "word_count", "text": "...", "rail": "base-local/USDC"}

`rail` (optional, routing only) picks which accepted rail to invoice on; every other
field is validated by the task's schema. Nothing received is executed or evaluated.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from envelopay.config import AcceptedRail, WorkerConfig
from envelopay.engine import Context, Enqueue, Notice, Refuse
from envelopay.errors import RailError, TransportError
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Invoice,
    Methods,
    Offer,
    Order,
    Pay,
    RailMethod,
    Which,
)
from envelopay.rails.amounts import amount_text, asset_decimals
from envelopay.rails.interface import Rail
from envelopay.worker.counterpay import CounterPayer, CounterPaymentBook
from envelopay.worker.execute import execute
from envelopay.worker.refunding import RefundsMoney
from envelopay.worker.tasks import TaskBook, TaskError, TaskRequest

__all__ = ["FreeResult", "Refusal", "WorkerApp", "WorkerApplication"]

RAIL_KEY = "rail"

# A counter-leg refused in a way that shows nothing moved (its own rail's, the enforcer's
# reasons): the give leg may go back. Any other (the RPC lost mid-payment, the enforcer
# holding the payment for approval) may still pay.
_NOTHING_MOVED = frozenset({"insufficient_funds", "tx_failed"})
_ENFORCER_NOTHING_MOVED = frozenset({"insufficient_funds", "spend_refused"})
STAYS = "; the give leg stays with the worker until the operator settles it"
# What the OOPS says of a give leg's refund, by its status (worker/refunds.py RefundResult).
_GIVE_LEG_FATE = {"paid": "went back", "pending": "is being paid back",
                  "failed": "could not be paid back: the operator will settle it"}


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer of OOPS: the code, a human note, optional detail fields."""

    code: OopsCode
    note: str
    field: str | None = None
    # An OFFER's counter-leg that may have paid (its outcome unknown): the give leg is not
    # refunded, it stays for the operator (SPEC.md "Refunds").
    in_doubt: bool = False


@dataclass(frozen=True, slots=True)
class FreeResult:
    """ORDER answered directly with FULFILL (free or prepaid task)."""

    result: Any
    note: str


def _split_rail(task: Any) -> tuple[Any, str | None]:
    """Separate the routing hint from the task's data fields."""
    if isinstance(task, dict) and RAIL_KEY in task:
        rest = {k: v for k, v in task.items() if k != RAIL_KEY}
        hint = task[RAIL_KEY]
        return rest, hint if isinstance(hint, str) else ""
    return task, None


class WorkerApp:
    """Business decisions of a paid worker, from its config. No I/O except rail.pay()."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        tasks: TaskBook | None = None,
        rails: Mapping[str, Rail] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[str], str] = lambda prefix: f"{prefix}_{secrets.token_hex(6)}",
        counterpayments: CounterPaymentBook | None = None,
        counter_payer: CounterPayer | None = None,
    ) -> None:
        self.config = config
        self.tasks = tasks if tasks is not None else TaskBook.from_config(config)
        self.rails = dict(rails or {})
        self.decimals = asset_decimals(self.rails)
        self.clock = clock
        self.new_id = new_id
        self.counterpayments = counterpayments
        # Through the spend enforcer (it holds the key, keys the payment by the OFFER, and
        # pays at most once): no local book is needed then.
        self.counter_payer = counter_payer

    def amount(self, units: int, chain: str, token: str) -> str:
        """An amount as a person reads it in a note or subject: `0.25 USDC` (the JSON
        beside it keeps the smallest units)."""
        return amount_text(units, token, self.decimals(chain, token))

    # -- pricing -------------------------------------------------------------------
    def _rail(self, hint: str | None) -> AcceptedRail | Refusal:
        if not self.config.accept:
            return Refusal(OopsCode.MISSING_WALLET, "this worker has no accepted rail configured")
        if hint is None:
            return self.config.accept[0]
        for r in self.config.accept:
            if f"{r.chain}/{r.token}".lower() == hint.lower():
                return r
        offered = ", ".join(f"{r.chain}/{r.token}" for r in self.config.accept)
        return Refusal(OopsCode.UNSUPPORTED_RAIL, f"task.rail {hint[:64]!r} is not accepted; use {offered}",
                       "task.rail")

    def _resolve(self, task: Any) -> tuple[TaskRequest | Refusal, str | None]:
        data, hint = _split_rail(task)
        req = self.tasks.resolve(data)
        if isinstance(req, TaskError):
            return Refusal(req.code, req.detail, req.field), hint
        return req, hint

    def methods(self, which: Which) -> Methods | Refusal:
        """WHICH → METHODS (indicative prices; the task's own when one is described)."""
        if not self.config.accept:
            return Refusal(OopsCode.MISSING_WALLET, "this worker has no accepted rail configured")
        req: TaskRequest | None = None
        note = "Indicative prices"
        pair = _exchange_pair(which.task)
        if pair is not None:
            return self._exchange_methods(which, *pair)
        if which.task is not None:
            resolved, _ = self._resolve(which.task)
            if isinstance(resolved, TaskRequest):
                req = resolved
                note = f"Price for {req.task.name}"
        rails = []
        for r in self.config.accept:
            if req is not None:
                price = req.task.config.price_for(r.chain, r.token)
            else:
                prices = [t.price_for(r.chain, r.token) for t in self.config.tasks]
                paid = [p for p in prices if p > 0]
                price = min(paid) if paid else 0
            rails.append(RailMethod(chain=r.chain, token=r.token, wallet=r.wallet, price=price))
        tasks = ", ".join(self.tasks.names())
        return Methods(
            id=self.new_id("mth"),
            which_ref=which.id,
            rails=rails,
            note=f"{note}; tasks: {tasks}" if tasks else note,
            # Only to an asker that named them: a strict peer gets no field it did not ask for.
            extensions=[e for e in self.config.agent.extensions if e in (which.extensions or ())] or None,
        )

    def _exchange_methods(self, which: Which, give: str, want: str) -> Methods | Refusal:
        """WHICH asking "do you trade GIVE for WANT?" (SPEC.md "Client checks before
        paying"): yes → METHODS with the give rail, the wallet to pay it into and the
        note `exchange GIVE for WANT: ...`; no → the ordinary METHODS, noting it."""
        chain, _, token = give.partition("/")
        for p in self.config.exchange:
            if p.give.lower() == give.lower() and p.want.lower() == want.lower():
                wallet = self.wallet_for(chain, token)
                if wallet is None:
                    break
                rail = RailMethod(chain=chain, token=token, wallet=wallet, price=int(p.give_unit))
                # The rate in the assets' units, spelled as the operator declared them.
                want_chain, _, want_token = p.want.partition("/")
                give_chain, _, give_token = p.give.partition("/")
                most = self.amount(int(p.want_per_unit), want_chain, want_token)
                rate = f"at most {most} per {self.amount(int(p.give_unit), give_chain, give_token)}"
                return Methods(id=self.new_id("mth"), which_ref=which.id, rails=[rail],
                               note=f"exchange {give} for {want}: {rate}"[:200])
        plain = self.methods(which.model_copy(update={"task": None}))
        if isinstance(plain, Refusal):
            return plain
        return plain.model_copy(update={"note": f"no exchange of {give} for {want} here"[:200]})

    # -- orders --------------------------------------------------------------------
    def decide_order(self, order: Order) -> Invoice | FreeResult | Refusal:
        """ORDER (not prepaid) → INVOICE for a priced task, the result for a free one."""
        resolved, hint = self._resolve(order.task)
        if isinstance(resolved, Refusal):
            return resolved
        rail = self._rail(hint)
        if isinstance(rail, Refusal):
            return rail
        price = resolved.task.config.price_for(rail.chain, rail.token)
        if price == 0:
            return FreeResult(None, f"{resolved.task.name}: free")
        return Invoice(
            id=self.new_id("inv"),
            order_ref=order.id,
            amount=price,
            token=rail.token,
            chain=rail.chain,
            wallet=rail.wallet,
            note=f"{resolved.task.name}: {self.amount(price, rail.chain, rail.token)} on {rail.chain}",
        )

    def prepaid_terms(self, order: Order) -> tuple[int, str] | Refusal:
        """A v0.2 prepaid ORDER: the minimum amount and the wallet the proof must pay."""
        resolved, _ = self._resolve(order.task)
        if isinstance(resolved, Refusal):
            return resolved
        for r in self.config.accept:
            if r.chain == order.chain and r.token == order.token:
                return resolved.task.config.price_for(r.chain, r.token), r.wallet
        return Refusal(OopsCode.UNSUPPORTED_RAIL, f"{order.chain}/{order.token} is not accepted", "chain")

    async def run_task(self, task: Any) -> Any | Refusal:
        """Run the declared handler for an ORDER's task (after payment, or when free)."""
        resolved, _ = self._resolve(task)
        if isinstance(resolved, Refusal):
            return resolved
        # A command always runs as its own process (envelopay.worker.execute).
        out = await (execute(resolved) if resolved.task.config.command else self.tasks.run(resolved))
        if isinstance(out, TaskError):
            return Refusal(out.code, out.detail, out.field)
        return out

    # -- exchange ------------------------------------------------------------------
    def wallet_for(self, chain: str, token: str) -> str | None:
        """Our receiving wallet: an accepted rail's, or the chain's wallet for an asset we
        take as the give leg of a declared exchange pair."""
        for r in self.config.accept:
            if r.chain == chain and r.token.lower() == token.lower():
                return r.wallet
        pair = f"{chain}/{token}".lower()
        if any(p.give.lower() == pair for p in self.config.exchange):
            return self.config.wallets.get(chain)
        return None

    def check_offer(self, offer: Offer) -> Refusal | None:
        """Is this pair and rate one we trade? (before the give proof is verified)"""
        give = f"{offer.give.chain}/{offer.give.token}".lower()
        want = f"{offer.want.chain}/{offer.want.token}".lower()
        for pair in self.config.exchange:
            if pair.give.lower() != give or pair.want.lower() != want:
                continue
            # want ≤ give × rate, in integers: want × give_unit ≤ give × want_per_unit
            if offer.want.amount * int(pair.give_unit) > offer.give.amount * int(pair.want_per_unit):
                return Refusal(OopsCode.AMOUNT_MISMATCH, "the rate asked is above what this worker pays",
                               "want.amount")
            if int(pair.max_want) and offer.want.amount > int(pair.max_want):
                return Refusal(OopsCode.AMOUNT_MISMATCH, "the amount asked is above this worker's cap",
                               "want.amount")
            if self.counter_payer is None and offer.want.chain not in self.rails:
                return Refusal(OopsCode.RAIL_UNAVAILABLE, f"no rail to pay on {offer.want.chain}")
            return None
        return Refusal(OopsCode.UNSUPPORTED_RAIL, f"this worker does not trade {give} for {want}", "want")

    async def accept_offer(self, offer: Offer, peer: str = "") -> Accept | Refusal:
        """After the give proof verified: pay the counter-asset, ACCEPT with its proof.

        With a counter-payment book, a redo for the same (peer, offer id) returns the
        recorded ACCEPT instead of paying again (see envelopay.worker.counterpay)."""
        refused = self.check_offer(offer)
        if refused is not None:
            return refused
        if self.counter_payer is not None:
            return await self._accept_through_enforcer(offer, peer)
        book = self.counterpayments
        if book is not None:
            state, recorded = book.begin(peer, offer.id)
            if state == "paid" and recorded is not None:
                return Accept.model_validate(recorded, strict=False)
            if state == "in_doubt":
                return Refusal(OopsCode.RAIL_UNAVAILABLE,
                               "a counter-payment for this OFFER was started and its outcome is unknown"
                               + STAYS, in_doubt=True)
        rail = self.rails[offer.want.chain]
        try:
            w = offer.want
            proof = await rail.pay(chain=w.chain, token=w.token, amount=w.amount, recipient=offer.wallet)
        except RailError as exc:
            doubt = exc.reason not in _NOTHING_MOVED
            if book is not None and not doubt:
                book.failed(peer, offer.id)  # the rail refused: nothing moved
            # else the attempt stays `paying`: asked again, the OFFER is in doubt, never paid twice
            poor = exc.reason == "insufficient_funds"
            code = OopsCode.INSUFFICIENT_FUNDS if poor else OopsCode.RAIL_UNAVAILABLE
            return Refusal(code, f"counter-payment failed: {exc.reason}" + (STAYS if doubt else ""),
                           in_doubt=doubt)
        accept = Accept(
            id=self.new_id("acc"),
            offer_ref=offer.id,
            amount=offer.want.amount,
            token=offer.want.token,
            chain=offer.want.chain,
            proof=proof,
            note=f"{self.amount(w.amount, w.chain, w.token)} sent on {w.chain}",
        )
        if book is not None:
            book.paid(peer, offer.id, accept.model_dump(mode="json"))
        return accept


    async def _accept_through_enforcer(self, offer: Offer, peer: str) -> Accept | Refusal:
        assert self.counter_payer is not None
        w = offer.want
        try:
            proof = await self.counter_payer.pay_leg(
                chain=w.chain, token=w.token, amount=w.amount, recipient=offer.wallet,
                payee=peer, key=f"offer:{peer.lower()}:{offer.id}")
        except RailError as exc:
            poor = exc.reason == "insufficient_funds"
            code = OopsCode.INSUFFICIENT_FUNDS if poor else OopsCode.RAIL_UNAVAILABLE
            doubt = exc.reason not in _ENFORCER_NOTHING_MOVED
            return Refusal(code, f"counter-payment not made: {exc.reason}" + (STAYS if doubt else ""),
                           in_doubt=doubt)
        except TransportError as exc:  # it may have paid before the line went
            return Refusal(OopsCode.RAIL_UNAVAILABLE, f"the enforcer is unreachable: {exc}"[:120] + STAYS,
                           in_doubt=True)
        return Accept(
            # The same OFFER always gets the same ACCEPT id: a redo answers alike.
            id=f"acc_{offer.id}"[:64], offer_ref=offer.id, amount=w.amount, token=w.token, chain=w.chain,
            proof=proof, note=f"{self.amount(w.amount, w.chain, w.token)} sent on {w.chain}",
        )


# -- the engine's Application, backed by WorkerApp ---------------------------------------



def _refuse(r: Refusal) -> Refuse:
    return Refuse(r.code, r.note)


class WorkerApplication(RefundsMoney):
    """The paid worker as the engine's `Application`.

    With `jobs` on (what `worker serve` runs), a paid, free or prepaid ORDER's work is
    taken on as a job (`Enqueue`: the row commits with the step, the job runner answers
    later, envelopay.worker.runner); `on_job` hears each committed job (the runner's
    wake-up). Off, the handler runs inside the step, as a library embedding the engine
    without a runner needs."""

    def __init__(
        self, app: WorkerApp, *, jobs: bool = False, on_job: Callable[[str], None] | None = None
    ) -> None:
        self.app = app
        self.jobs = jobs
        self.on_job = on_job

    def wallet(self, chain: str, token: str) -> str | None:
        return self.app.wallet_for(chain, token)

    async def methods(self, which: Which, ctx: Context) -> Methods | None:
        out = self.app.methods(which)
        return None if isinstance(out, Refusal) else out  # no rail: silence is valid

    async def _fulfil(self, order: Order, note: str) -> Fulfill | Enqueue | Refuse:
        if self.jobs:
            return self._enqueue(order)
        result = await self.app.run_task(order.task)
        if isinstance(result, Refusal):
            return _refuse(result)
        return Fulfill(id=self.app.new_id("ful"), order_ref=order.id, result=result, note=note[:200])

    def _enqueue(self, order: Order) -> Enqueue | Refuse:
        resolved, _ = self.app._resolve(order.task)
        if isinstance(resolved, Refusal):
            return _refuse(resolved)
        data, _ = _split_rail(order.task)
        params = dict(data) if isinstance(data, dict) else {"name": resolved.task.name}
        cfg = resolved.task.config
        return Enqueue(cfg.name, params, policy=cfg.on_failure, idempotent=cfg.idempotent)

    async def order(
        self, order: Order, ctx: Context, *, paid: int | None
    ) -> Invoice | Fulfill | Enqueue | Refuse | None:
        if order.prepaid:
            # v0.2 prepaid: the engine verified the proof for order.amount to our wallet.
            terms = self.app.prepaid_terms(order)
            if isinstance(terms, Refusal):
                return _refuse(terms)
            price, _wallet = terms
            if paid is None or paid < price:
                costs = self.app.amount(price, order.chain or "", order.token or "")
                paid_text = self.app.amount(paid or 0, order.chain or "", order.token or "")
                back = await self.refund_prepaid(order, ctx, paid or 0, price, "amount_mismatch")
                return Refuse(OopsCode.AMOUNT_MISMATCH, f"this task costs {costs}; paid {paid_text}", back)
            back = None
            if paid > price:  # the excess above the tolerance goes back; the work goes on
                back = await self.refund_prepaid(order, ctx, paid - price, price, "overpaid")
            done = await self._fulfil(order, "Prepaid order fulfilled")
            if isinstance(done, Fulfill) and back:  # said in the FULFILL (SPEC.md "Refunds")
                done = done.model_copy(update={"refund": dict(back["refund"])})
            elif isinstance(done, Enqueue) and back:  # kept in the flow: the job's FULFILL says it
                done = replace(done, refund=dict(back["refund"]))
            return done
        decision = self.app.decide_order(order)
        if isinstance(decision, Refusal):
            return _refuse(decision)
        if isinstance(decision, FreeResult):
            return await self._fulfil(order, decision.note)
        return decision

    async def fulfill(self, order: Order, pay: Pay, ctx: Context) -> Fulfill | Enqueue | Refuse:
        paid = self.app.amount(pay.amount, pay.chain, pay.token)
        return await self._fulfil(order, f"Paid {paid}; here is the result")

    async def offer(self, offer: Offer, ctx: Context) -> Accept | Refuse | None:
        if self.give_leg_refunded(offer, ctx):  # asked again after a crash: never both legs
            back = await self.refund_offer(offer, ctx)
            return Refuse(OopsCode.PROOF_REPLAYED, "this OFFER's give leg was paid back already", back)
        out = await self.app.accept_offer(offer, ctx.peer)
        if not isinstance(out, Refusal):
            return out
        # The give leg verified (the engine asks only then) and buys nothing: it goes back,
        # unless the counter-leg may have paid (SPEC.md "Refunds").
        back = None if out.in_doubt else await self.refund_offer(offer, ctx)
        refund = back.get("refund") if back else None
        if not isinstance(refund, Mapping):
            return Refuse(out.code, out.note, back)
        g = offer.give
        back_text = self.app.amount(int(refund["amount"]), g.chain, g.token)
        fate = _GIVE_LEG_FATE.get(str(refund.get("status")), "is with the operator")
        return Refuse(out.code, f"{out.note}; the give leg, {back_text}, {fate}"[:200], back)

    async def notify(self, notice: Notice) -> None:
        if notice.job_id is not None and self.on_job is not None:
            self.on_job(notice.job_id)


def _exchange_pair(task: Any) -> tuple[str, str] | None:
    """The (give, want) of a WHICH task `{"exchange": {"give": "c/T", "want": "c/T"}}`."""
    ex = task.get("exchange") if isinstance(task, dict) else None
    if not isinstance(ex, dict):
        return None
    give, want = ex.get("give"), ex.get("want")
    if isinstance(give, str) and isinstance(want, str) and "/" in give and "/" in want:
        return give, want
    return None
