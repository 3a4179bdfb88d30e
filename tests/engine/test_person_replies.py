"""A person who answers is answered (issue 30, item 4), through the real walled garden
(LMTP, Maildirs) over SQLite and PostgreSQL.

A person pays on-chain and presses Reply on our INVOICE: the client writes
`Re: INVOICE | ...`, the quoted original below, the PAY JSON they typed on top. In a
thread we started, that reply is read as the PAY (served: FULFILL), or answered with an
OOPS that says what to change. Mail that is not protocol is recorded with its reason;
with [answers] help on, its sender gets one help note a day, never list or automatic
mail. Before: every one of these mails was dropped with no answer and no record.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from tests._engines import worker

from envelopay.engine import Engine, Outcome
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.store import AnswerLimits, ProofKey, Store
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.messages import Fulfill, Invoice, Oops
from envelopay.protocol.parse import parse
from envelopay.protocol.parsed import Parsed
from envelopay.testing import mock_rail as k

_BARE_LF = re.compile(rb"(?<!\r)\n")


def as_received(stored: bytes) -> bytes:
    """A Maildir file's bytes with CRLF line ends, as they went over LMTP (a Maildir may
    store them with LF, as Dovecot and mutt expect)."""
    return _BARE_LF.sub(b"\r\n", stored)


PERSON = "ann@garden.test"
BOB = "bob@garden.test"


@dataclass
class Garden:
    """The worker engine on a real garden; the person sends raw bytes through it."""

    garden: GardenServer
    transport: GardenTransport
    engine: Engine
    rail: k.DictRail
    clock: k.Clock
    drainer: OutboxDrainer
    outcomes: list[Outcome] = field(default_factory=list)

    async def send(self, raw: bytes, sender: str = PERSON) -> Outcome:
        """`raw` from `sender` to the worker through the garden; the worker reads its
        Maildir, handles the mail, and its answers are drained through the garden."""
        await self.transport.send(raw, sender, k.WORKER)
        got = self.take(k.WORKER)
        assert len(got) == 1
        outcome = await self.engine.handle(got[0])
        self.outcomes.append(outcome)
        await self.drainer.drain()
        return outcome

    def take(self, address: str) -> list[bytes]:
        """Every new mail in `address`'s Maildir, as received (CRLF), oldest first."""
        box = self.garden.maildir(address) / "new"
        paths = sorted(box.iterdir(), key=lambda p: p.stat().st_mtime_ns) if box.exists() else []
        out = [as_received(p.read_bytes()) for p in paths]
        for p in paths:
            p.unlink()
        return out

    def inbox(self) -> list[Parsed]:
        """What reached the person, parsed."""
        return [parse(raw) for raw in self.take(PERSON)]


@pytest.fixture
async def world(store: Store, tmp_path: Path) -> AsyncIterator[Callable[..., Garden]]:
    async with GardenServer(tmp_path / "garden", [k.WORKER, PERSON, BOB], open_garden=True) as garden:
        transport = GardenTransport(garden.endpoint)

        def make(limits: AnswerLimits | None = None) -> Garden:
            rail = k.DictRail()
            eng = worker(store, rail, answer_limits=limits or AnswerLimits())
            drainer = OutboxDrainer(store, DirectHook(transport), clock=eng.clock, owner=eng.worker_id)
            assert isinstance(eng.clock, k.Clock)
            return Garden(garden, transport, eng, rail, eng.clock, drainer)

        try:
            yield make
        finally:
            await transport.close()


def order_mail(oid: str = "ord_ann") -> bytes:
    """The person's ORDER, as the CLI would write it (a protocol subject)."""
    return k.raw(k.order(oid), sender=PERSON, message_id=f"<{oid}@garden.test>")


def invoice_of(g: Garden) -> tuple[bytes, Parsed]:
    got = g.take(PERSON)
    assert len(got) == 1
    parsed = parse(got[0])
    assert isinstance(parsed.message, Invoice)
    return got[0], parsed


def quoted(original: bytes) -> str:
    """The original's text part, quoted `> ` as Thunderbird and Gmail quote it."""
    body = original.split(b"\r\n\r\n", 1)[1].decode("utf-8", "replace")
    return "\r\n".join("> " + line for line in body.splitlines())


def client_reply(invoice_raw: bytes, inv: Parsed, typed: str, *, shape: str) -> bytes:
    """A reply as a mail client writes it: `Re: <our subject>`, threaded by
    In-Reply-To/References, `typed` on top and the original below, in the client's
    shape (thunderbird: plain text with an attribution line; gmail:
    multipart/alternative with the quote in a gmail_quote blockquote; outlook: plain
    text with Outlook's underscore rule and From/Sent/To/Subject block)."""
    refs = " ".join([*inv.references, inv.message_id or ""]).strip()
    head = (
        f"From: Ann Person <{PERSON}>\r\nTo: {k.WORKER}\r\nSubject: Re: {inv.subject}\r\n"
        f"Date: Mon, 30 Nov 2026 12:05:00 +0000\r\nMessage-ID: <reply.{shape}.{len(typed)}@garden.test>\r\n"
        f"In-Reply-To: {inv.message_id}\r\nReferences: {refs}\r\nMIME-Version: 1.0\r\n"
    )
    if shape == "thunderbird":
        return (
            head + "User-Agent: Mozilla Thunderbird\r\n"
            "Content-Type: text/plain; charset=UTF-8; format=flowed\r\n"
            "Content-Transfer-Encoding: 8bit\r\n\r\n"
            f"{typed}\r\n\r\nOn 30/11/2026 12:00, {k.WORKER} wrote:\r\n{quoted(invoice_raw)}\r\n"
        ).encode()
    if shape == "gmail":
        html_typed = typed.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
        return (
            head + 'Content-Type: multipart/alternative; boundary="000000000000abcd"\r\n\r\n'
            "--000000000000abcd\r\nContent-Type: text/plain; charset=\"UTF-8\"\r\n\r\n"
            f"{typed}\r\n\r\nOn Mon, Nov 30, 2026 at 12:00 PM <{k.WORKER}> wrote:\r\n\r\n"
            f"{quoted(invoice_raw)}\r\n\r\n"
            "--000000000000abcd\r\nContent-Type: text/html; charset=\"UTF-8\"\r\n\r\n"
            f'<div dir="ltr">{html_typed}</div><br><div class="gmail_quote"><div dir="ltr" '
            f'class="gmail_attr">On Mon, Nov 30, 2026 at 12:00 PM &lt;{k.WORKER}&gt; wrote:<br></div>'
            '<blockquote class="gmail_quote">INVOICE</blockquote></div>\r\n'
            "--000000000000abcd--\r\n"
        ).encode()
    assert shape == "outlook"
    return (
        head + "Content-Type: text/plain; charset=\"us-ascii\"\r\nX-Mailer: Microsoft Outlook 16.0\r\n\r\n"
        f"{typed}\r\n\r\n________________________________\r\nFrom: {k.WORKER}\r\n"
        f"Sent: Monday, November 30, 2026 12:00 PM\r\nTo: Ann Person <{PERSON}>\r\n"
        f"Subject: {inv.subject}\r\n\r\n"
        + invoice_raw.split(b"\r\n\r\n", 1)[1].decode("utf-8", "replace")
    ).encode()


def pay_json(inv: Invoice, tx: str) -> str:
    """The PAY a person types: the invoice's terms, the transaction they made."""
    return json.dumps({
        "v": "0.1.0", "type": "pay", "id": "pay_ann", "amount": str(inv.amount), "token": inv.token,
        "chain": inv.chain, "invoice_ref": inv.id, "proof": {"tx": tx},
    })


# ------------------------------------------------------------------ replies in our thread


@pytest.mark.parametrize("shape", ["thunderbird", "gmail", "outlook"])
async def test_a_reply_to_our_invoice_carrying_a_pay_is_served(
    world: Callable[..., Garden], store: Store, shape: str
) -> None:
    g = world()
    ordered = await g.send(order_mail())
    assert (ordered.status, ordered.state) == ("processed", "invoiced")
    invoice_raw, inv = invoice_of(g)
    assert isinstance(inv.message, Invoice)
    g.rail.txs["tx-ann"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    reply = client_reply(invoice_raw, inv, pay_json(inv.message, "tx-ann"), shape=shape)
    assert not parse(reply).protocol  # read alone (no thread known) it is not protocol (v0.1)

    paid = await g.send(reply)

    assert (paid.status, paid.state, paid.flow_id) == ("processed", "fulfilled", ordered.flow_id)
    assert store.proof_status(ProofKey(k.CHAIN, "tx-ann")) == "spent"
    answers = g.inbox()
    assert [type(a.message) for a in answers] == [Fulfill]
    assert answers[0].in_reply_to == f"<reply.{shape}.{len(pay_json(inv.message, 'tx-ann'))}@garden.test>"
    log = store.flow_log(ordered.flow_id or "")
    assert [(e.direction, e.type) for e in log] == [("in", "order"), ("out", "invoice"), ("in", "pay"),
                                                    ("out", "fulfill")]


async def test_a_malformed_reply_is_told_what_to_change(world: Callable[..., Garden], store: Store) -> None:
    g = world()
    ordered = await g.send(order_mail())
    invoice_raw, inv = invoice_of(g)
    assert isinstance(inv.message, Invoice)
    g.rail.txs["tx-ann"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    typed = pay_json(inv.message, "tx-ann").replace('"token"', "'token'")  # a person's single quotes
    out = await g.send(client_reply(invoice_raw, inv, typed, shape="thunderbird"))

    assert (out.status, out.oops) == ("refused", "invalid_json")
    answers = g.inbox()
    assert len(answers) == 1 and isinstance(answers[0].message, Oops)
    oops = answers[0].message
    assert oops.error.code == "invalid_json"
    assert "above the quoted mail" in oops.note and "straight double quotes" in oops.note
    # Nothing moved: the flow waits for a PAY, the proof was never judged or spent.
    flow = store.get_flow(ordered.flow_id or "")
    assert flow is not None and flow.state == "invoiced"
    assert store.proof_status(ProofKey(k.CHAIN, "tx-ann")) is None
    assert g.rail.verify_calls == 0
    # The corrected reply is then served.
    fixed = await g.send(client_reply(invoice_raw, inv, pay_json(inv.message, "tx-ann") + " ", shape="gmail"))
    assert (fixed.status, fixed.state) == ("processed", "fulfilled")


async def test_a_reply_whose_json_has_no_type_is_answered_missing_field(world: Callable[..., Garden]) -> None:
    g = world()
    await g.send(order_mail())
    invoice_raw, inv = invoice_of(g)
    typed = '{"v": "0.1.0", "amount": "100", "proof": {"tx": "tx-ann"}}'
    out = await g.send(client_reply(invoice_raw, inv, typed, shape="thunderbird"))
    assert (out.status, out.oops) == ("refused", "missing_field")
    answers = g.inbox()
    assert len(answers) == 1 and isinstance(answers[0].message, Oops)
    assert "`type`" in answers[0].message.note


async def test_a_re_reply_in_a_thread_we_do_not_know_is_recorded_not_read(
    world: Callable[..., Garden], store: Store
) -> None:
    g = world()
    await g.send(order_mail())
    invoice_raw, inv = invoice_of(g)
    assert isinstance(inv.message, Invoice)
    g.rail.txs["tx-ann"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    reply = client_reply(invoice_raw, inv, pay_json(inv.message, "tx-ann"), shape="thunderbird")
    stranger = reply.replace(str(inv.message_id).encode(), b"<someone-else@elsewhere.test>")
    out = await g.send(stranger)
    assert (out.status, out.outbox) == ("ignored", ())
    assert "Re:/Fwd: prefix" in out.detail
    recorded = store.inbound_outcome(k.WORKER, out.message_id or "")
    assert recorded is not None and recorded["status"] == "ignored" and "Re:/Fwd:" in recorded["detail"]
    assert g.inbox() == [] and g.rail.verify_calls == 0


async def test_a_thanks_in_our_thread_is_recorded_as_prose(
    world: Callable[..., Garden], store: Store
) -> None:
    g = world()
    await g.send(order_mail())
    invoice_raw, inv = invoice_of(g)
    out = await g.send(client_reply(invoice_raw, inv, "Thanks! I will pay tomorrow.", shape="outlook"))
    assert (out.status, out.outbox) == ("ignored", ())
    assert out.detail == "not protocol: a reply in our thread with no JSON object in it"
    recorded = store.inbound_outcome(k.WORKER, out.message_id or "")
    assert recorded is not None and recorded["detail"] == out.detail
    assert g.inbox() == []


# ------------------------------------------------------------------ prose from strangers


def prose(n: int, *extra: str, sender: str = PERSON) -> bytes:
    headers = "".join(f"{h}\r\n" for h in extra)
    return (
        f"From: {sender}\r\nTo: {k.WORKER}\r\nSubject: Hello, what do you do?\r\n"
        f"Message-ID: <prose{n}@garden.test>\r\nDate: Mon, 30 Nov 2026 12:00:00 +0000\r\n{headers}\r\n"
        "Hi, I found your address. Can you count words for me?\r\n"
    ).encode()


async def test_prose_is_recorded_and_not_answered_by_default(
    world: Callable[..., Garden], store: Store
) -> None:
    g = world()
    out = await g.send(prose(1))
    assert (out.status, out.outbox, out.unanswered) == ("ignored", (), None)
    assert out.detail == "not protocol: subject is not `TYPE` or `TYPE | note`"
    recorded = store.inbound_outcome(k.WORKER, "<prose1@garden.test>")
    assert recorded is not None and recorded["detail"] == out.detail
    assert g.inbox() == []
    again = await g.send(prose(1))  # redelivered: the record, handed back
    assert again.repeat == "message_id"


async def test_prose_gets_one_help_note_per_sender_per_day(
    world: Callable[..., Garden], store: Store
) -> None:
    g = world(AnswerLimits(help=True))
    first = await g.send(prose(1))
    assert first.status == "ignored" and len(first.outbox) == 1 and first.unanswered is None
    raw_help = g.take(PERSON)
    assert len(raw_help) == 1
    assert b"\r\nAuto-Submitted: auto-replied\r\n" in raw_help[0]
    help_note = parse(raw_help[0])
    assert isinstance(help_note.message, Oops) and help_note.in_reply_to == "<prose1@garden.test>"
    assert "Send WHICH" in help_note.message.note
    # The same day: recorded, not answered; another sender has a note of its own.
    second = await g.send(prose(2))
    assert (second.status, second.outbox, second.unanswered) == ("ignored", (), "help_sent_today")
    recorded = store.inbound_outcome(k.WORKER, "<prose2@garden.test>")
    assert recorded is not None and recorded["unanswered"] == "help_sent_today"
    other = await g.send(prose(3, sender=BOB))
    assert len(other.outbox) == 1 and len(g.take(BOB)) == 1
    g.clock.now += timedelta(days=1, minutes=1)
    third = await g.send(prose(4))
    assert len(third.outbox) == 1 and third.unanswered is None
    assert [type(p.message) for p in g.inbox()] == [Oops]


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        ("List-Id: <people.lists.garden.test>", "list_mail"),
        ("Precedence: bulk", "precedence_bulk"),
        ("Auto-Submitted: auto-replied", "auto_submitted"),
    ],
)
async def test_list_bulk_and_automatic_prose_never_gets_help(
    world: Callable[..., Garden], store: Store, header: str, reason: str
) -> None:
    g = world(AnswerLimits(help=True))
    out = await g.send(prose(1, header))
    assert (out.status, out.outbox, out.unanswered) == ("ignored", (), reason)
    assert g.inbox() == []
    recorded = store.inbound_outcome(k.WORKER, "<prose1@garden.test>")
    assert recorded is not None and recorded["unanswered"] == reason
    # Nothing was drawn for it: the sender's plain mail later still gets its note.
    later = await g.send(prose(2))
    assert len(later.outbox) == 1


@pytest.mark.parametrize("shape", ["gmail", "outlook"])
async def test_json_typed_with_single_quotes_is_answered_not_taken_for_prose(
    world: Callable[..., Garden], shape: str
) -> None:
    g = world()
    await g.send(order_mail())
    invoice_raw, inv = invoice_of(g)
    typed = "{'v': '0.1.0', 'type': 'pay', 'amount': '100', 'proof': {'tx': 'tx-ann'}}"
    out = await g.send(client_reply(invoice_raw, inv, typed, shape=shape))
    assert (out.status, out.oops) == ("refused", "invalid_json")
    answers = g.inbox()
    assert len(answers) == 1 and isinstance(answers[0].message, Oops)
    assert "straight double quotes" in answers[0].message.note


async def test_a_reply_in_one_thread_paying_another_invoice_is_a_thread_conflict(
    world: Callable[..., Garden], store: Store
) -> None:
    g = world()
    await g.send(order_mail("ord_a"))
    raw_a, inv_a = invoice_of(g)
    await g.send(order_mail("ord_b"))
    _, inv_b = invoice_of(g)
    assert isinstance(inv_b.message, Invoice)
    g.rail.txs["tx-ann"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    out = await g.send(client_reply(raw_a, inv_a, pay_json(inv_b.message, "tx-ann"), shape="thunderbird"))
    assert (out.status, out.oops) == ("refused", "thread_conflict")
    assert [type(a.message) for a in g.inbox()] == [Oops]
    assert store.proof_status(ProofKey(k.CHAIN, "tx-ann")) is None and g.rail.verify_calls == 0
