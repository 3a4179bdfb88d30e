"""Invoice binding (spend check S4): `pay_invoice` pays only an INVOICE that reached this
agent's inbox with an aligned DKIM pass from the payee's domain, for an ORDER this agent
sent through the enforcer, and only once. The wallet, amount, token and chain come from
that INVOICE, never from the agent's call.

The enforcer reads the agent's Maildir itself and verifies DKIM itself: the agent can
write into its own Maildir, so a file there proves nothing until its signature does.
The agent's Maildir is found by the one rule the garden, Dovecot (`maildir:ROOT/%u`) and
the agent's own tools use: `<inbox root>/<address, lowercased>/` (mail.maildir.mailbox_path).
The same reading finds the payee's answer to a PAY: an OOPS in reply to it, signed by the
payee's domain, is what `check_payment_status` reports as `paid_refused`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from envelopay import dkim
from envelopay.enforcer.send.model import Agent
from envelopay.enforcer.spend.policy import MAX_AMOUNT, Refusal
from envelopay.errors import UsageError
from envelopay.mail.line_ends import from_disk
from envelopay.mail.maildir import mailbox_path, open_maildir
from envelopay.protocol.messages import Invoice, Oops
from envelopay.protocol.parse import parse

__all__ = [
    "BoundInvoice",
    "InvoiceSource",
    "MaildirInvoices",
    "PayeeRefusal",
    "bind_invoice",
    "payee_refusal",
]

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
AMBIGUOUS = "invoice_ambiguous"
NOT_FROM = "invoice_not_from_payee"
OUT_OF_RANGE = "invoice_amount_out_of_range"

# What the inbox remembers of one file: (Message-ID, protocol id, In-Reply-To).
_Names = tuple["str | None", "str | None", "str | None"]


class InvoiceSource(Protocol):
    def candidates(self, agent: Agent, ref: str) -> list[bytes]:
        """Raw inbound messages that may be the INVOICE named `ref` (a Message-ID or an
        INVOICE id). Reading only; never changes the inbox."""
        ...

    def answers(self, agent: Agent, message_id: str) -> list[bytes]:
        """Raw inbound messages in reply to our `message_id` (their In-Reply-To)."""
        ...


class MaildirInvoices:
    """Each agent's Maildir at `root/<address>` (new/ and cur/), the garden's layout.

    A pay_invoice call looks for one message among all of them; parsing every file on
    every call would cost the whole inbox each time. So each file's Message-ID, protocol
    id and In-Reply-To are remembered by (path, size, mtime): a call parses only files it
    has not seen. The memory only locates: a file it points at is read and parsed again,
    and its bytes (DKIM included) decide; a file the agent rewrote behind a restored mtime
    can at worst be missed, never bound on what it used to say."""

    def __init__(self, root: Path, *, remember: int = 200_000) -> None:
        self.root = Path(root)
        self.remember = remember
        self._names: dict[tuple[str, int, int], _Names] = {}

    def candidates(self, agent: Agent, ref: str) -> list[bytes]:
        return self._scan(agent, lambda names: ref in names[:2])

    def answers(self, agent: Agent, message_id: str) -> list[bytes]:
        return self._scan(agent, lambda names: names[2] == message_id)

    def folder(self, agent: Agent) -> Path | None:
        try:
            return mailbox_path(self.root, agent.address)
        except UsageError:
            return None  # an address no Maildir can be named after holds no mail here

    def _scan(self, agent: Agent, wanted: Callable[[_Names], bool]) -> list[bytes]:
        out: list[bytes] = []
        box = self.folder(agent)
        if box is None:
            return out
        for sub in ("new", "cur"):
            folder = box / sub
            try:
                # Not through a folder the agent swapped for a link (to another agent's
                # Maildir): maildir.open_maildir refuses one at the address folder or here.
                os.close(open_maildir(box, sub)[0])
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                continue  # no such folder (yet), or a link
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
                if known is not None and not wanted(known):
                    continue
                raw = self._read(entry.path, key, wanted)
                if raw is not None:
                    out.append(raw)
        return out

    def _read(self, path: str, key: tuple[str, int, int], wanted: Callable[[_Names], bool]) -> bytes | None:
        """The file's bytes if `wanted` takes its names (parsed now, and remembered)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # not a link swapped in meanwhile
            with os.fdopen(fd, "rb") as f:
                raw = f.read(1_000_001)
        except OSError:
            return None
        if len(raw) > 1_000_000:
            return None
        raw = from_disk(os.path.basename(path), raw)  # the bytes as received: LF on disk (line_ends)
        parsed = parse(raw)
        names: _Names = (parsed.message_id, parsed.id, parsed.in_reply_to)
        if len(self._names) >= self.remember:  # forget the oldest half
            for old in list(self._names)[: self.remember // 2]:
                del self._names[old]
        self._names[key] = names
        return raw if wanted(names) else None


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
    bound: Bound | None = None, payee: str = "",
) -> BoundInvoice | Refusal:
    """The INVOICE `ref` names, bound; or the refusal of the best-ranked candidate. An
    INVOICE id is unique only within its sender: when INVOICEs from several payees bind
    under one id, the call is refused as ambiguous (name it by Message-ID, or give the
    payee) rather than paying whichever sorted first. An INVOICE that `bound` says was
    paid already bound once, ORDER included: its ORDER's send record may since have aged
    out (enforcer retention), and the caller answers with that payment's outcome."""
    if not raws:
        return _blocked(NOT_FOUND, f"no message {ref} in the agent's inbox")
    refusals: list[Refusal] = []
    found: dict[str, BoundInvoice] = {}
    for raw in raws:
        one = await _bind_one(agent, ref, raw, dns=dns, sent_orders=sent_orders, bound=bound, payee=payee)
        if isinstance(one, Refusal):
            refusals.append(one)
        else:
            found.setdefault(one.key, one)  # the same INVOICE twice (new/ and cur/) is one
    if len(found) > 1:
        payees = ", ".join(sorted({b.payee for b in found.values()}))
        return _blocked(AMBIGUOUS, f"{ref} names INVOICEs from {payees}: give its Message-ID, or the payee")
    if found:
        return next(iter(found.values()))
    rank = [OUT_OF_RANGE, NO_ORDER, MISALIGNED, DKIM_FAILED, NO_DKIM, NOT_FROM, NOT_ADDRESSED, NOT_AN_INVOICE]
    refusals.sort(key=lambda r: rank.index(r.code) if r.code in rank else len(rank))
    return refusals[0]


async def _bind_one(
    agent: Agent, ref: str, raw: bytes, *, dns: dkim.DnsLookup, sent_orders: SentOrders,
    bound: Bound | None, payee: str,
) -> BoundInvoice | Refusal:
    parsed = parse(raw)
    if not parsed.valid or not isinstance(parsed.message, Invoice) or not parsed.from_addr:
        return _blocked(NOT_AN_INVOICE, f"{ref} is not a valid INVOICE")
    if agent.address.lower() not in {a.lower() for a in parsed.to_addrs}:
        return _blocked(NOT_ADDRESSED, "the INVOICE is not addressed to this agent")
    if payee and parsed.from_addr.lower() != payee.lower():
        return _blocked(NOT_FROM, f"the INVOICE {ref} is from {parsed.from_addr}, not {payee}")
    verified = await _signed_by_sender(raw, parsed.from_addr, dns)
    if verified is not None:
        return verified
    inv = parsed.message
    if inv.amount > MAX_AMOUNT:  # the stores keep amounts as signed 64-bit integers
        return _blocked(OUT_OF_RANGE, f"the INVOICE's amount {inv.amount} is beyond {MAX_AMOUNT}")
    order_ref = inv.order_ref or ""
    key = f"invoice:{parsed.from_addr.lower()}:{inv.id}"
    paid = bound is not None and await bound(key)
    recipients = await sent_orders(order_ref) if order_ref and not paid else []
    if not paid and parsed.from_addr.lower() not in {r.lower() for r in recipients}:
        named = order_ref or "(none named)"
        return _blocked(NO_ORDER, f"this agent sent no ORDER {named} to {parsed.from_addr}")
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


async def _signed_by_sender(raw: bytes, sender: str, dns: dkim.DnsLookup) -> Refusal | None:
    """None when `raw` carries a DKIM pass aligned with `sender`'s domain; else why not."""
    verdict = await dkim.verify(raw, dns=dns)
    domain = sender.rsplit("@", 1)[1].lower()
    if verdict.status == "none":
        return _blocked(NO_DKIM, "the message carries no DKIM signature")
    if verdict.status != "pass":
        return _blocked(DKIM_FAILED, f"DKIM {verdict.status}: {verdict.detail}"[:200])
    if not verdict.aligned or not dkim.aligned(verdict.domain, domain):
        return _blocked(MISALIGNED, f"signed by {verdict.domain}, not {domain}")
    return None


@dataclass(frozen=True, slots=True)
class PayeeRefusal:
    """The payee's OOPS to a PAY whose money moved."""

    code: str
    note: str
    message_id: str


async def payee_refusal(
    raws: list[bytes], *, payee: str, pay_id: str, message_id: str, dns: dkim.DnsLookup
) -> PayeeRefusal | None:
    """The first OOPS among `raws` (answers to our PAY `message_id`) that the payee sent:
    from the payee's address, with a DKIM pass aligned with its domain, naming the PAY by
    In-Reply-To (answers() chose those) and, when it names one, by `ref`."""
    for raw in raws:
        parsed = parse(raw)
        oops = parsed.message
        if not isinstance(oops, Oops) or (parsed.from_addr or "").lower() != payee.lower():
            continue
        if oops.ref is not None and oops.ref != pay_id:
            continue
        if await _signed_by_sender(raw, payee, dns) is not None:
            continue  # anyone can write into the agent's inbox: only the payee's signature counts
        code = oops.error.code if oops.error is not None else "oops"
        return PayeeRefusal(code=code, note=oops.note[:300], message_id=parsed.message_id or "")
    return None
