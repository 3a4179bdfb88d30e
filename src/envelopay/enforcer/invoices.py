"""Invoice binding (spend check S4): `pay_invoice` pays only an INVOICE that reached this
agent's inbox with an aligned DKIM pass from the payee's domain, for an ORDER this agent
sent through the enforcer, and only once. The wallet, amount, token and chain come from
that INVOICE, never from the agent's call.

The enforcer reads the agent's Maildir itself and verifies DKIM itself: the agent can
write into its own Maildir, so a file there proves nothing until its signature does.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from envelopay import dkim
from envelopay.enforcer.model import Agent
from envelopay.enforcer.spend import Refusal

__all__ = ["BoundInvoice", "InvoiceSource", "MaildirInvoices", "bind_invoice"]

# Reason codes, all `blocked` (SPEC.md "Spend enforcer").
NOT_FOUND = "invoice_not_found"
NOT_AN_INVOICE = "invoice_not_an_invoice"
NOT_ADDRESSED = "invoice_not_addressed_to_agent"
NO_DKIM = "invoice_dkim_missing"
DKIM_FAILED = "invoice_dkim_failed"
MISALIGNED = "invoice_dkim_misaligned"
NO_ORDER = "invoice_order_unknown"
ALREADY_PAID = "invoice_already_paid"
MISMATCH = "invoice_mismatch"
REQUIRED = "invoice_required"


class InvoiceSource(Protocol):
    def candidates(self, agent: Agent, ref: str) -> list[bytes]:
        """Raw inbound messages that may be the INVOICE named `ref` (a Message-ID or an
        INVOICE id). Reading only; never changes the inbox."""
        ...


class MaildirInvoices:
    """Each agent's Maildir at `root/<agent name>` (new/ and cur/).

    A pay_invoice call looks for one message among all of them; parsing every file on
    every call would cost the whole inbox each time. So each file's Message-ID and
    protocol id are remembered by (path, size, mtime): a call parses only files it has not
    seen. The memory only locates: a file it points at is read and parsed again, and its
    bytes (DKIM included) decide; a file the agent rewrote behind a restored mtime can at
    worst be missed, never bound on what it used to say."""

    def __init__(self, root: Path, *, remember: int = 200_000) -> None:
        self.root = Path(root)
        self.remember = remember
        self._names: dict[tuple[str, int, int], tuple[str | None, str | None]] = {}

    def candidates(self, agent: Agent, ref: str) -> list[bytes]:
        out: list[bytes] = []
        for sub in ("new", "cur"):
            folder = self.root / agent.name / sub
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue  # no such folder (yet)
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue  # moved between new/ and cur/ meanwhile
                # Deliveries are plain files: a link the agent planted points elsewhere.
                if st.st_size > 1_000_000 or not stat.S_ISREG(st.st_mode):
                    continue
                key = (entry.path, st.st_size, st.st_mtime_ns)
                known = self._names.get(key)
                if known is not None and ref not in known:
                    continue
                raw = self._read(entry.path, key, ref)
                if raw is not None:
                    out.append(raw)
        return out

    def _read(self, path: str, key: tuple[str, int, int], ref: str) -> bytes | None:
        """The file's bytes if they name `ref`'s message (parsed now, and remembered)."""
        from envelopay.protocol.parse import parse

        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # not a link swapped in meanwhile
            with os.fdopen(fd, "rb") as f:
                raw = f.read(1_000_001)
        except OSError:
            return None
        if len(raw) > 1_000_000:
            return None
        parsed = parse(raw)
        names = (parsed.message_id, parsed.id)
        if len(self._names) >= self.remember:  # forget the oldest half
            for old in list(self._names)[: self.remember // 2]:
                del self._names[old]
        self._names[key] = names
        return raw if ref in names else None


@dataclass(frozen=True, slots=True)
class BoundInvoice:
    """The terms of a bound INVOICE: what pay_invoice pays, and to whom."""

    key: str  # "invoice:<payee>:<INVOICE id>": one payment per INVOICE
    invoice_id: str
    message_id: str
    payee: str  # the INVOICE's From address
    chain: str
    token: str
    amount: int
    wallet: str
    order_ref: str


def _blocked(code: str, detail: str = "") -> Refusal:
    return Refusal("blocked", code, detail)


SentOrders = Callable[[str], Awaitable[list[str]]]  # order id → recipients of this agent's ORDERs
Bound = Callable[[str], Awaitable[bool]]  # INVOICE key → a payment of it is recorded


async def bind_invoice(
    agent: Agent, ref: str, raws: list[bytes], *, dns: dkim.DnsLookup, sent_orders: SentOrders,
    bound: Bound | None = None,
) -> BoundInvoice | Refusal:
    """The first candidate that binds, or the refusal of the best-ranked one. An INVOICE
    that `bound` says was paid already bound once, ORDER included: its ORDER's send record
    may since have aged out (enforcer retention), and the caller answers with that
    payment's outcome."""
    from envelopay.protocol.messages import Invoice
    from envelopay.protocol.parse import parse

    if not raws:
        return _blocked(NOT_FOUND, f"no message {ref} in the agent's inbox")
    refusals: list[Refusal] = []
    for raw in raws:
        parsed = parse(raw)
        if not parsed.valid or not isinstance(parsed.message, Invoice) or not parsed.from_addr:
            refusals.append(_blocked(NOT_AN_INVOICE, f"{ref} is not a valid INVOICE"))
            continue
        if agent.address.lower() not in {a.lower() for a in parsed.to_addrs}:
            refusals.append(_blocked(NOT_ADDRESSED, "the INVOICE is not addressed to this agent"))
            continue
        verdict = await dkim.verify(raw, dns=dns)
        payee_domain = parsed.from_addr.rsplit("@", 1)[1].lower()
        if verdict.status == "none":
            refusals.append(_blocked(NO_DKIM, "the INVOICE carries no DKIM signature"))
            continue
        if verdict.status != "pass":
            refusals.append(_blocked(DKIM_FAILED, f"DKIM {verdict.status}: {verdict.detail}"[:200]))
            continue
        if not verdict.aligned or not dkim.aligned(verdict.domain, payee_domain):
            refusals.append(_blocked(MISALIGNED, f"signed by {verdict.domain}, not {payee_domain}"))
            continue
        inv = parsed.message
        order_ref = inv.order_ref or ""
        key = f"invoice:{parsed.from_addr.lower()}:{inv.id}"
        paid = bound is not None and await bound(key)
        recipients = await sent_orders(order_ref) if order_ref and not paid else []
        if not paid and parsed.from_addr.lower() not in {r.lower() for r in recipients}:
            refusals.append(
                _blocked(
                    NO_ORDER, f"this agent sent no ORDER {order_ref or '(none named)'} to {parsed.from_addr}"
                )
            )
            continue
        return BoundInvoice(
            key=key,
            invoice_id=inv.id,
            message_id=parsed.message_id or ref,
            payee=parsed.from_addr,
            chain=inv.chain.lower(),
            token=inv.token,
            amount=int(inv.amount),
            wallet=inv.wallet,
            order_ref=order_ref,
        )
    rank = [NO_ORDER, MISALIGNED, DKIM_FAILED, NO_DKIM, NOT_ADDRESSED, NOT_AN_INVOICE]
    refusals.sort(key=lambda r: rank.index(r.code) if r.code in rank else len(rank))
    return refusals[0]
