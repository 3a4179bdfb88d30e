"""Money back: a refund paid at most once across processes and crashes, recovered after one.

A refund is keyed by what it pays back (`job:<id>` for failed paid work, `pay:<chain>:<proof
key>` for money the worker cannot use: an underpayment, an overpayment's excess). It goes
on the rail the money came on, to the wallet the verified proof paid from. The ledger's
refunds table (envelopay.ledger.refunds) is written before anything is signed, so a second
ask — a redo after a crash, another worker on the same PostgreSQL ledger — finds the first:

- **Own key** (`OwnKeyPayer`): the worker's rail key, through the rail's custodial payer
  (envelopay.rails.custodial), which signs and broadcasts apart. The signed transaction's
  id and bytes are recorded before the broadcast; after a crash the chain is asked about
  that id first — confirmed: paid; missing: the *same bytes* go out again (they pay at
  most once); failed or expired: nothing moved, so a new one is signed. A second payment
  is never signed while one may still land.
- **Through the spend enforcer** (`EnforcerPayer`): the same `CounterPayer` seam the
  OFFER counter-legs use, keyed `refund:<key>`; the enforcer pays at most once per key,
  so a refund in doubt is simply asked again with the same key.

`Refunder.refund(order)` answers with a `RefundResult`: paid (with the proof), pending (in
doubt or being paid elsewhere: ask again later) or failed (nothing moved).
"""

from __future__ import annotations

import asyncio
import secrets as _secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from envelopay.errors import RailError, TransportError, UsageError
from envelopay.ledger.refunds import Refund, RefundBook, RefundOrder
from envelopay.rails.amounts import Decimals, asset_decimals, no_decimals
from envelopay.rails.custodial import CustodialPayer, SignedPayment
from envelopay.rails.interface import Rail
from envelopay.rails.key_file import read_key_file
from envelopay.rails.registry import discover
from envelopay.worker.counterpay import CounterPayer

__all__ = [
    "EnforcerPayer",
    "OwnKeyPayer",
    "RefundPayer",
    "RefundResult",
    "Refunder",
    "own_key_payer",
    "refund_fields",
    "refunder_for",
]

# How long a refund is its worker's alone: past it, a worker that died is taken over (a
# payment's broadcast waits at most a minute for its confirmation).
LEASE = timedelta(minutes=2)

# Where a crash test stops the process (the hook is a no-op in production).
CRASH_POINTS = ("after_claim", "after_sign", "after_broadcast")

Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class RefundResult:
    status: Literal["paid", "pending", "failed"]
    refund: Refund | None
    detail: str = ""

    @property
    def paid(self) -> bool:
        return self.status == "paid"


def refund_fields(refund: Refund, status: str = "paid") -> dict[str, Any]:
    """The OOPS extension (SPEC.md "Refunds"): `{"refund": {chain, token, amount, wallet,
    proof, status, reason}}` inside the OOPS `error` object, whose unknown fields a strict
    peer ignores. `amount` is a digit string in the asset's smallest unit, as on the wire."""
    o = refund.order
    body: dict[str, Any] = {
        "chain": o.chain, "token": o.token, "amount": str(o.amount), "wallet": o.recipient,
        "status": status, "reason": o.reason,
    }
    if refund.proof is not None:
        body["proof"] = refund.proof
    return {"refund": body}


class RefundPayer(Protocol):
    """Pays one claimed refund row and records its progress in the book."""

    def can_pay(self, chain: str) -> bool: ...

    async def settle(self, book: RefundBook, row: Refund, owner: str, now: Clock,
                     crash: Callable[[str], None]) -> RefundResult: ...


class EnforcerPayer:
    """Refunds through the spend enforcer (it holds the key): at most once per key there."""

    def __init__(self, payer: CounterPayer) -> None:
        self.payer = payer

    def can_pay(self, chain: str) -> bool:
        return True  # the enforcer says no itself (a RailError) when it holds no wallet there

    async def settle(self, book: RefundBook, row: Refund, owner: str, now: Clock,
                     crash: Callable[[str], None]) -> RefundResult:
        o = row.order
        try:
            proof = await self.payer.pay_leg(chain=o.chain, token=o.token, amount=o.amount,
                                             recipient=o.recipient, payee=o.peer, key=f"refund:{o.key}")
        except RailError as exc:
            if exc.reason == "pending_approval":  # the enforcer holds it: ask again later
                book.release(o.key, owner, str(exc), now())
                return RefundResult("pending", book.get(o.key), str(exc))
            book.failed(o.key, owner, str(exc), now())
            return RefundResult("failed", book.get(o.key), str(exc))
        except TransportError as exc:  # in doubt: the same key is asked again
            book.release(o.key, owner, f"enforcer unreachable: {exc}", now())
            return RefundResult("pending", book.get(o.key), "the enforcer is unreachable")
        crash("after_broadcast")
        book.paid(o.key, owner, dict(proof), str(proof.get("tx") or "") or None, now())
        return RefundResult("paid", book.get(o.key))


class OwnKeyPayer:
    """Refunds from the worker's own rail keys: `payers[chain]` signs with `keys[chain]`."""

    def __init__(self, payers: Mapping[str, CustodialPayer], keys: Mapping[str, bytes]) -> None:
        self.payers = dict(payers)
        self.keys = dict(keys)

    def can_pay(self, chain: str) -> bool:
        return chain in self.payers and chain in self.keys

    async def settle(self, book: RefundBook, row: Refund, owner: str, now: Clock,
                     crash: Callable[[str], None]) -> RefundResult:
        o = row.order
        payer, key = self.payers.get(o.chain), self.keys.get(o.chain)
        if payer is None or key is None:
            book.failed(o.key, owner, f"no paying key for {o.chain}", now())
            return RefundResult("failed", book.get(o.key), f"no paying key for {o.chain}")
        if row.status == "signed" and row.tx_id is not None and row.signed is not None:
            return await self._recover(book, row, payer, owner, now)
        try:
            signed = await payer.prepare(key, token=o.token, amount=o.amount, recipient=o.recipient)
        except (RailError, UsageError) as exc:
            book.failed(o.key, owner, str(exc), now())
            return RefundResult("failed", book.get(o.key), str(exc))
        if not book.signed(o.key, owner, signed.tx_id, signed.blob, now()):
            return RefundResult("pending", book.get(o.key), "the refund was taken over")
        crash("after_sign")
        outcome, detail = await payer.broadcast(signed)
        crash("after_broadcast")
        if outcome != "sent":
            book.failed(o.key, owner, f"{outcome}: {detail}", now())
            return RefundResult("failed", book.get(o.key), detail)
        return await self._confirm(book, o, payer, signed.tx_id, owner, now)

    async def _confirm(self, book: RefundBook, o: RefundOrder, payer: CustodialPayer, tx_id: str, owner: str,
                       now: Clock) -> RefundResult:
        state = await payer.lookup(tx_id)
        if state == "confirmed":
            book.paid(o.key, owner, dict(payer.proof(tx_id)), tx_id, now())
            return RefundResult("paid", book.get(o.key))
        if state == "failed":
            book.failed(o.key, owner, "the refund transaction failed on chain", now())
            return RefundResult("failed", book.get(o.key), "the refund transaction failed on chain")
        book.release(o.key, owner, f"sent, chain says {state}", now())
        return RefundResult("pending", book.get(o.key), f"sent; the chain says {state}")

    async def _recover(self, book: RefundBook, row: Refund, payer: CustodialPayer, owner: str,
                       now: Clock) -> RefundResult:
        """A refund signed before a crash: ask the chain about it before anything else."""
        assert row.tx_id is not None and row.signed is not None
        o = row.order
        state = await payer.lookup(row.tx_id)
        if state == "missing":  # perhaps never broadcast: the same bytes, never new ones
            outcome, detail = await payer.broadcast(SignedPayment(row.tx_id, row.signed))
            if outcome != "sent":  # expired or refused: it can never land, nothing moved
                book.failed(o.key, owner, f"{outcome}: {detail}", now())
                return RefundResult("failed", book.get(o.key), detail)
        return await self._confirm(book, o, payer, row.tx_id, owner, now)


def own_key_payer(rails: Mapping[str, Rail], keys: Mapping[str, bytes]) -> OwnKeyPayer:
    """The worker's own keys (`keys[chain]`, as its rails were given them) through each rail's
    custodial payer (entry point group `envelopay.payers`, named as the rail)."""
    plugins = discover("envelopay.payers")
    payers: dict[str, CustodialPayer] = {}
    for chain, rail in rails.items():
        plugin = plugins.get(rail.name)
        factory = plugin.load_object() if plugin is not None else None
        payer = factory(rail) if callable(factory) else None
        if isinstance(payer, CustodialPayer):
            payers[chain] = payer
    return OwnKeyPayer(payers, {c: k for c, k in keys.items() if c in payers})


class Refunder:
    """Claims a refund in the book, pays it through `payer`, records the proof."""

    def __init__(
        self,
        book: RefundBook,
        payer: RefundPayer,
        *,
        owner: str = "",
        lease: timedelta = LEASE,
        clock: Clock = lambda: datetime.now(UTC),
        crash: Callable[[str], None] = lambda point: None,
        decimals: Decimals = no_decimals,
    ) -> None:
        self.book = book
        self.payer = payer
        self.decimals = decimals  # for the notes a person reads: `0.25 USDC`, not 250000
        # One owner per Refunder (per process): a second process of the same worker, or an
        # operator's command, never takes a refund that a live one is paying; a dead one's
        # rows are recovered when their lease runs out.
        self.owner = f"{owner or 'refunder'}/{_secrets.token_hex(4)}"
        self.lease = lease
        self.clock = clock
        self.crash = crash
        self._busy: dict[str, asyncio.Lock] = {}

    async def refund(self, order: RefundOrder) -> RefundResult:
        """Pay `order` back, once. A redo returns the recorded outcome (the same proof)."""
        if order.amount <= 0:
            return RefundResult("failed", None, "nothing to refund")
        lock = self._busy.setdefault(order.key, asyncio.Lock())
        async with lock:  # one settle per key in this process; the lease covers the others
            now = self.clock()
            claimed, row = self.book.claim(order, owner=self.owner, now=now, lease_until=now + self.lease)
            if claimed == "paid":
                return RefundResult("paid", row)
            if claimed == "busy":
                return RefundResult("pending", row, "another worker is paying this refund")
            self.crash("after_claim")
            result = await self.payer.settle(self.book, row, self.owner, self.clock, self.crash)
            if result.status == "failed" and claimed == "retake" and row.status == "signed":
                # The one signed before could never land: now, and only now, sign anew.
                again = self.book.claim(order, owner=self.owner, now=self.clock(),
                                        lease_until=self.clock() + self.lease)
                if again[0] == "retake":
                    result = await self.payer.settle(self.book, again[1], self.owner, self.clock, self.crash)
            return result

    async def recover(self, local: str) -> list[RefundResult]:
        """After a restart: settle every refund left in doubt (paying or signed) by a
        process that died; failed ones wait for whoever asks for them again."""
        out = []
        for row in self.book.unsettled(local):
            if row.status in ("paying", "signed"):
                out.append(await self.refund(row.order))
        return out


def refunder_for(
    store: object,
    *,
    rails: Mapping[str, Rail],
    keys: Mapping[str, Any] | None = None,
    counter_payer: CounterPayer | None = None,
    owner: str = "",
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    lease: timedelta = LEASE,
) -> Refunder:
    """The refunder a worker serves with: through the enforcer when it pays there, else from
    its own rail keys (`keys[rail name]`, as its `[rails.NAME] keypair`: bytes or a file)."""
    payer: RefundPayer
    if counter_payer is not None:
        payer = EnforcerPayer(counter_payer)
    else:
        raw = {name: (k if isinstance(k, bytes) else read_key_file(k)) for name, k in (keys or {}).items()}
        payer = own_key_payer(rails, {c: raw[r.name] for c, r in rails.items() if r.name in raw})
    return Refunder(RefundBook(store, now=clock()), payer, owner=owner, clock=clock, lease=lease,
                    decimals=asset_decimals(rails))
