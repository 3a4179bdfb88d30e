"""The agent mailbox over real Maildirs and SQLite; sends go through a real aiosmtpd server."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import aioimaplib
import aiosmtplib
import pytest
from aiosmtpd.smtp import SMTP, Envelope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopay.errors import UsageError
from envelopay.mail.imap import ImapConfig, ImapSource
from envelopay.mail.mailbox import (
    MAX_BODY_CHARS,
    CheckFilter,
    Mailbox,
    MailboxError,
    OutgoingMail,
    SendResult,
)
from envelopay.mail.maildir import deliver_file
from envelopay.protocol.compose import compose_message
from envelopay.protocol.messages import Methods, RailMethod, Which
from envelopay.protocol.parse import parse
from envelopay.testing.dovecot import running_dovecot

ME = "agent@garden.test"


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t

    def tick(self, seconds: float = 60) -> None:
        self.t += timedelta(seconds=seconds)


class Sink:
    """aiosmtpd handler keeping each envelope's exact bytes."""

    def __init__(self) -> None:
        self.envelopes: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        assert envelope.mail_from is not None and isinstance(envelope.content, bytes)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
async def smtp() -> AsyncIterator[tuple[Sink, int]]:
    sink = Sink()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(sink, decode_data=False), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield sink, port
    finally:
        server.close()
        await server.wait_closed()


def smtp_send(port: int):  # type: ignore[no-untyped-def]
    calls: list[OutgoingMail] = []

    async def send(out: OutgoingMail) -> SendResult:
        calls.append(out)
        # Raw bytes as composed, one transaction (never re-flattened).
        await aiosmtplib.send(
            out.raw,
            sender=out.sender,
            recipients=list(out.recipients),
            hostname="127.0.0.1",
            port=port,
            start_tls=False,
            use_tls=False,
        )
        return SendResult("sent")

    send.calls = calls  # type: ignore[attr-defined]
    return send


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def box(tmp_path: Path, clock: Clock) -> Mailbox:
    counter = iter(range(1, 10_000))
    mb = Mailbox(tmp_path / "agent", address=ME, now=clock, new_id=lambda: f"{next(counter):012x}")
    yield mb
    mb.close()


def mail(
    n: int,
    *,
    sender: str = "peer@example.test",
    subject: str | None = None,
    body: str | None = None,
    to: str = ME,
    cc: str | None = None,
    in_reply_to: str | None = None,
    references: str | None = None,
    attachment: tuple[str, bytes] | None = None,
) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    if cc:
        msg["Cc"] = cc
    msg["Subject"] = subject if subject is not None else f"note {n}"
    msg["Message-ID"] = f"<m{n}@example.test>"
    msg["Date"] = "Mon, 30 Nov 2026 10:00:00 +0000"
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = references
    msg.set_content(body if body is not None else f"body of message {n}")
    if attachment:
        msg.add_attachment(
            attachment[1], maintype="application", subtype="octet-stream", filename=attachment[0]
        )
    return msg.as_bytes(policy=policy.SMTP)


# ------------------------------------------------------------------ storing and check


def test_deliver_stores_exact_bytes_and_indexes(box: Mailbox) -> None:
    raw = mail(1)
    rec = box.deliver(raw)
    assert box.raw(rec.id) == raw
    assert (rec.folder, rec.from_addr, rec.subject, rec.message_id) == (
        "inbox",
        "peer@example.test",
        "note 1",
        "<m1@example.test>",
    )
    assert rec.to_addrs == (ME,) and rec.read is False and rec.status == "ok"
    files = os.listdir(box.folder_path("inbox") / "new")
    assert len(files) == 1  # a real Maildir entry


def test_check_filters_sort_n_and_truncate(box: Mailbox, clock: Clock) -> None:
    ids = []
    for n in range(1, 6):
        att = ("data.bin", b"\x00\x01") if n == 4 else None
        sender = "boss@example.test" if n % 2 else "peer@example.test"
        ids.append(box.deliver(mail(n, sender=sender, body=f"report {n} " + "x" * 40, attachment=att)).id)
        clock.tick(60)
    newest = box.check()
    assert [r.id for r in newest] == ids[::-1]
    assert [r.id for r in box.check(flt=CheckFilter(sort="oldest", n=2))] == ids[:2]
    assert {r.id for r in box.check(flt=CheckFilter(from_="BOSS@"))} == {ids[0], ids[2], ids[4]}
    assert [r.id for r in box.check(flt=CheckFilter(subject="NOTE 3"))] == [ids[2]]
    assert [r.id for r in box.check(flt=CheckFilter(contains="report 5"))] == [ids[4]]
    umlaut = box.deliver(mail(6, subject="ÜBERWEISUNG erhalten", body="Grüße"))
    assert [r.id for r in box.check(flt=CheckFilter(subject="überweisung"))] == [umlaut.id]
    assert [r.id for r in box.check(flt=CheckFilter(contains="GRÜßE"))] == [umlaut.id]
    box.delete([umlaut.id])
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    window = CheckFilter(after=start + timedelta(seconds=30), before=start + timedelta(seconds=150))
    assert [r.id for r in box.check(flt=window)] == [ids[2], ids[1]]
    assert [r.id for r in box.check(flt=CheckFilter(has_attachments=True))] == [ids[3]]
    assert len(box.check(flt=CheckFilter(has_attachments=False))) == 4
    short = box.check(flt=CheckFilter(n=1, truncate=8))[0]
    assert short.preview == "report 5…"[:8] + "…" and len(short.body) > 40
    full = box.check(flt=CheckFilter(n=1, truncate=0))[0]
    assert full.preview == full.body
    box.read([ids[0]])
    assert ids[0] not in {r.id for r in box.check(flt=CheckFilter(unread_only=True))}
    assert len(box.check(flt=CheckFilter(unread_only=True))) == 4


def test_check_refuses_bad_filters_and_folders(box: Mailbox) -> None:
    for kwargs, field in (
        ({"n": 0}, "n"),
        ({"n": 10_001}, "n"),
        ({"n": 10**20}, "n"),  # past SQLite's integers: refused, not an OverflowError
        ({"truncate": -1}, "truncate"),
        ({"sort": "random"}, "sort"),
        ({"after": datetime(2026, 1, 1)}, "after"),
    ):
        with pytest.raises(MailboxError) as err:
            CheckFilter(**kwargs)  # type: ignore[arg-type]
        assert err.value.field == field and err.value.code == "invalid_filter"
    with pytest.raises(MailboxError) as err2:
        box.check("spam")
    assert err2.value.code == "invalid_folder"
    assert box.check(flt=CheckFilter(n=10_000)) == []
    for limit in (0, 10_001, 10**20):
        with pytest.raises(MailboxError) as err3:
            box.search("x", limit=limit)
        assert (err3.value.code, err3.value.field) == ("invalid_filter", "limit")
    assert box.search("x", limit=10_000) == []


# ------------------------------------------------------------------ search, read, archive, delete


async def test_search_regex_over_sender_subject_body(box: Mailbox, smtp: tuple[Sink, int]) -> None:
    a = box.deliver(mail(1, sender="alice@example.test", subject="invoice 42", body="pay soon"))
    b = box.deliver(mail(2, sender="bob@example.test", subject="lunch", body="the INVOICE is attached"))
    c = box.deliver(mail(3, sender="carol@example.test", subject="misc", body="nothing"))
    sent = await box.send(smtp_send(smtp[1]), "dora@example.test", "invoice copy", "here it is")
    assert sent.status == "sent", sent
    box.archive([c.id])
    assert {r.id for r in box.search(r"invoice\s*\d*")} == {a.id, b.id, sent.id}
    assert [r.id for r in box.search(r"^bob@")] == [b.id]
    assert box.search("nothing") == []  # archive is not searched without a folder
    assert [r.id for r in box.search("nothing", folder="archive")] == [c.id]
    assert [r.id for r in box.search("invoice", folder="sent")] == [sent.id]
    with pytest.raises(MailboxError) as err:
        box.search("(unclosed")
    assert (err.value.code, err.value.field) == ("invalid_regex", "query")


def test_read_marks_only_inbox_and_dismiss(box: Mailbox) -> None:
    a = box.deliver(mail(1))
    b = box.deliver(mail(2))
    s = box.deliver(mail(3, sender=ME, to="x@example.test"), folder="sent")
    got = box.read([a.id, s.id])
    assert [r.id for r in got] == [a.id, s.id]
    assert got[0].read is True and got[0].body.startswith("body of message 1")
    assert box.get(b.id).read is False
    assert box.dismiss([b.id]) == 1 and box.get(b.id).read is True
    with pytest.raises(MailboxError) as err:
        box.read(["ffffffffffff"])
    assert err.value.code == "not_found"
    with pytest.raises(MailboxError):
        box.read(["../../etc/passwd"])


def test_archive_moves_file_and_delete_refuses_sent(box: Mailbox) -> None:
    a = box.deliver(mail(1))
    b = box.deliver(mail(2))
    s = box.deliver(mail(3, sender=ME, to="x@example.test"), folder="sent")
    raw_a = box.raw(a.id)
    box.read([a.id])
    [arch] = box.archive([a.id])
    assert arch.folder == "archive" and arch.read is False
    assert box.raw(a.id) == raw_a
    assert len(os.listdir(box.folder_path("archive") / "cur")) == 1
    assert box.check() == [box.get(b.id)] or [r.id for r in box.check()] == [b.id]
    with pytest.raises(MailboxError) as err:
        box.archive([s.id])
    assert err.value.code == "wrong_folder"
    # A refused batch deletes nothing, not even the deletable ids listed before it.
    with pytest.raises(MailboxError) as err2:
        box.delete([b.id, s.id])
    assert err2.value.code == "refused"
    assert box.get(b.id).folder == "inbox" and box.raw(s.id)
    assert box.delete([a.id, b.id]) == 2
    assert box.check() == [] and box.check("archive") == []
    assert os.listdir(box.folder_path("archive") / "cur") == []
    with pytest.raises(MailboxError):
        box.get(a.id)


# ------------------------------------------------------------------ replies and threads


async def test_reply_threading_headers_and_single_re(box: Mailbox, smtp: tuple[Sink, int]) -> None:
    sink, port = smtp
    parent = box.deliver(
        mail(
            2,
            subject="Re: plans",
            in_reply_to="<m1@example.test>",
            references="<m0@example.test> <m1@example.test>",
            cc=f"carol@example.test, {ME}",
            to=f"{ME}, dave@example.test",
        )
    )
    res = await box.reply(smtp_send(port), parent.id, "sounds good")
    assert res.status == "sent" and res.id is not None
    [(mail_from, rcpts, raw)] = sink.envelopes
    assert (mail_from, rcpts) == (ME, ["peer@example.test"])
    assert box.raw(res.id) == raw  # the stored sent copy is the exact bytes sent
    msg = message_from_bytes(raw, policy=policy.default)
    assert msg["Subject"] == "Re: plans"
    assert msg["In-Reply-To"] == "<m2@example.test>"
    assert msg["References"].split() == ["<m0@example.test>", "<m1@example.test>", "<m2@example.test>"]
    assert box.get(res.id).folder == "sent"
    # reply_all: To and Cc of the parent, minus ourselves and the main recipient.
    res2 = await box.reply(smtp_send(port), parent.id, "all of you", reply_all=True)
    assert res2.status == "sent"
    _, rcpts2, raw2 = sink.envelopes[1]
    assert rcpts2 == ["peer@example.test", "dave@example.test", "carol@example.test"]
    msg2 = message_from_bytes(raw2, policy=policy.default)
    assert msg2["To"] == "peer@example.test" and ME not in msg2["Cc"]
    fresh = box.deliver(mail(9, subject="question"))
    res3 = await box.reply(smtp_send(port), fresh.id, "answer")
    assert message_from_bytes(sink.envelopes[2][2], policy=policy.default)["Subject"] == "Re: question"
    assert (
        message_from_bytes(sink.envelopes[2][2], policy=policy.default)["References"] == "<m9@example.test>"
    )
    assert res3.status == "sent"


async def test_protocol_reply_uses_protocol_compose(
    box: Mailbox, smtp: tuple[Sink, int], clock: Clock
) -> None:
    sink, port = smtp
    raw, which_id = compose_message(
        Which(note="what do you take?"),
        sender="buyer@example.test",
        recipient=ME,
        domain="example.test",
        now=clock(),
    )
    parent = box.deliver(raw)
    assert parent.protocol_type == "which"
    methods = Methods(rails=[RailMethod(chain="solana", token="USDC", wallet="W1", price=100)])
    res = await box.reply_protocol(smtp_send(port), parent.id, methods)
    assert res.status == "sent"
    sent_raw = sink.envelopes[0][2]
    parsed = parse(sent_raw)
    assert parsed.valid and parsed.type is not None and parsed.type.value == "methods"
    assert parsed.subject is not None and not parsed.subject.lower().startswith("re:")
    assert parsed.in_reply_to == which_id and parsed.references == (which_id,)
    assert box.get(res.id or "").protocol_type == "methods"


def test_thread_groups_by_references(box: Mailbox, clock: Clock) -> None:
    a = box.deliver(mail(1, subject="start"))
    clock.tick()
    d = box.deliver(mail(4, subject="unrelated"))
    clock.tick()
    b = box.deliver(
        mail(2, subject="Re: start", in_reply_to="<m1@example.test>", references="<m1@example.test>")
    )
    clock.tick()
    # C only names B (In-Reply-To) yet joins A's thread through B's References.
    c = box.deliver(mail(3, subject="Re: start", in_reply_to="<m2@example.test>"))
    assert [r.id for r in box.thread(c.id)] == [a.id, b.id, c.id]
    assert [r.id for r in box.thread(d.id)] == [d.id]
    threads = box.threads()
    assert [[r.id for r in t] for t in threads] == [[a.id, b.id, c.id], [d.id]]


# ------------------------------------------------------------------ sending guards


async def test_send_refuses_bad_addresses_before_any_io(box: Mailbox, smtp: tuple[Sink, int]) -> None:
    send = smtp_send(smtp[1])
    bad = [
        ("to", "a@example.test, b@example.test"),
        ("to", "a@example.test\r\nBcc: evil@example.test"),
        ("to", "a@example.test b@example.test"),
        ("to", ""),
        ("cc", "x@example.test; y@example.test"),
    ]
    for field, value in bad:
        kwargs = {"to": "ok@example.test", "cc": []} | ({"to": value} if field == "to" else {"cc": [value]})
        with pytest.raises(MailboxError) as err:
            await box.send(send, kwargs["to"], "s", "b", cc=kwargs["cc"])  # type: ignore[arg-type]
        assert err.value.field == field and err.value.code == "invalid_address"
    with pytest.raises(MailboxError) as err2:
        await box.send(send, "ok@example.test", "hi\r\nBcc: evil@example.test", "b")
    assert (err2.value.code, err2.value.field) == ("header_injection", "subject")
    assert send.calls == [] and smtp[0].envelopes == []  # type: ignore[attr-defined]
    assert os.listdir(box.folder_path("outbox") / "new") == []


async def test_body_over_limit_rejected_not_truncated(box: Mailbox, smtp: tuple[Sink, int]) -> None:
    send = smtp_send(smtp[1])
    with pytest.raises(MailboxError) as err:
        await box.send(send, "ok@example.test", "big", "x" * (MAX_BODY_CHARS + 1))
    assert (err.value.code, err.value.field) == ("body_too_long", "message")
    assert smtp[0].envelopes == []
    res = await box.send(send, "ok@example.test", "exactly", "é" * MAX_BODY_CHARS)
    assert res.status == "sent"
    assert box.get(res.id or "").body.rstrip("\n") == "é" * MAX_BODY_CHARS


async def test_duplicate_guard_counts_only_successful_sends(
    box: Mailbox, clock: Clock, smtp: tuple[Sink, int]
) -> None:
    outcomes = iter(["failed", "blocked", "sent"])

    async def flaky(out: OutgoingMail) -> SendResult:
        return SendResult(next(outcomes))  # type: ignore[arg-type]

    assert (await box.send(flaky, "peer@example.test", "s", "same body")).status == "failed"
    assert (await box.send(flaky, "peer@example.test", "s", "same body")).status == "blocked"
    assert (await box.send(flaky, "peer@example.test", "s", "same body")).status == "sent"
    send = smtp_send(smtp[1])
    with pytest.raises(MailboxError) as err:
        await box.send(send, "PEER@example.test", "other subject", "same body")
    assert err.value.code == "duplicate_send"
    # A different body, or a different recipient, is not a duplicate.
    assert (await box.send(send, "peer@example.test", "s", "new body")).status == "sent"
    assert (await box.send(send, "other@example.test", "s", "same body")).status == "sent"
    clock.tick(3601)
    assert (await box.send(send, "peer@example.test", "s", "same body")).status == "sent"
    # Failed and blocked sends left nothing behind in the outbox; sent ones are in sent.
    assert box.check("outbox") == []
    assert len(box.check("sent", CheckFilter(n=50))) == 4


async def test_transport_exception_is_failed_and_pending_stays_in_outbox(box: Mailbox) -> None:
    async def broken(out: OutgoingMail) -> SendResult:
        raise ConnectionRefusedError("no server")

    async def held(out: OutgoingMail) -> SendResult:
        return SendResult("pending_approval", "needs a human")

    res = await box.send(broken, "peer@example.test", "s", "b1")
    assert res.status == "failed" and "ConnectionRefusedError" in res.detail
    res2 = await box.send(held, "peer@example.test", "s", "b2")
    assert res2.status == "pending_approval"
    [queued] = box.check("outbox")
    assert queued.id == res2.id and queued.subject == "s"


# ------------------------------------------------------------------ attachments


async def test_attachments_inside_dir_sent_and_listed(box: Mailbox, smtp: tuple[Sink, int]) -> None:
    sink, port = smtp
    (box.agent_dir / "work").mkdir()
    report = box.agent_dir / "work" / "report.csv"
    report.write_bytes(b"a,b\n1,2\n")
    res = await box.send(
        smtp_send(port), "peer@example.test", "report", "attached", attachments=["work/report.csv"]
    )
    assert res.status == "sent"
    sent = message_from_bytes(sink.envelopes[0][2], policy=policy.default)
    [part] = list(sent.iter_attachments())
    assert part.get_filename() == "report.csv" and part.get_content() == "a,b\n1,2\n"
    rec = box.get(res.id or "")
    assert [(a.filename, a.size) for a in rec.attachments] == [("report.csv", 8)]


async def test_attachment_paths_outside_the_agent_dir_are_refused(
    box: Mailbox, tmp_path: Path, smtp: tuple[Sink, int]
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    link = box.agent_dir / "innocent.txt"
    link.symlink_to(secret)
    send = smtp_send(smtp[1])
    for path in (secret, "../secret.txt", link, "innocent.txt", "/etc/passwd"):
        with pytest.raises(MailboxError) as err:
            await box.send(send, "peer@example.test", "s", "b", attachments=[path])
        assert (err.value.code, err.value.field) == ("attachment_outside", "attachments")
    with pytest.raises(MailboxError) as err2:
        await box.send(send, "peer@example.test", "s", "b", attachments=["missing.txt"])
    assert err2.value.code == "attachment_missing"
    assert smtp[0].envelopes == []


def test_received_attachments_are_extracted_with_safe_names(box: Mailbox) -> None:
    rec = box.deliver(mail(1, attachment=("../../evil.sh", b"#!/bin/sh\n")))
    [att] = rec.attachments
    assert att.filename == "../../evil.sh" and att.size == 10
    assert att.path is not None
    stored = (box.agent_dir / att.path).resolve()
    assert stored.is_relative_to(box.root / "attachments") and stored.read_bytes() == b"#!/bin/sh\n"
    assert stored.name == "evil.sh"


# ------------------------------------------------------------------ bad input received


def test_malformed_mime_is_stored_marked_and_parsed(box: Mailbox) -> None:
    raw = (
        b"From: a@example.test, b@example.test\r\nSubject: =?bogus-charset?Q?x?=\r\n"
        b'Content-Type: multipart/mixed; boundary="nope"\r\nMessage-ID: <bad@example.test>\r\n\r\n'
        b"no boundary ever appears \xff\xfe\r\n"
    )
    rec = box.deliver(raw)
    assert rec.status == "malformed"
    assert "from_not_single" in rec.problems and any("Defect" in p for p in rec.problems)
    assert box.raw(rec.id) == raw  # nothing lost
    assert [r.id for r in box.check()] == [rec.id]
    garbage = box.deliver(b"\x00\x01 not an email at all")
    assert garbage.status == "malformed" and box.raw(garbage.id) == b"\x00\x01 not an email at all"


def test_refresh_indexes_files_delivered_by_the_garden(box: Mailbox) -> None:
    deliver_file(box.folder_path("inbox"), mail(1), fsync=False)
    deliver_file(box.folder_path("inbox"), mail(2), fsync=False)
    added = box.refresh()
    assert sorted(r.subject for r in added) == ["note 1", "note 2"]
    assert box.refresh() == []
    assert len(box.check()) == 2


# ------------------------------------------------------------------ contacts


def test_contacts_upsert_edit_remove_atomically(box: Mailbox) -> None:
    book = box.contacts
    book.add("Peer@Example.test", name="Peer", note="pays on time")
    book.add("zed@example.test")
    assert [c.address for c in book.list()] == ["peer@example.test", "zed@example.test"]
    book.edit("peer@example.test", note="slow payer")
    c = book.get("peer@example.test")
    assert c is not None and (c.name, c.note) == ("Peer", "slow payer")
    book.add("peer@example.test", name="P2")  # upsert replaces
    assert book.get("peer@example.test").note == ""  # type: ignore[union-attr]
    assert book.remove("zed@example.test") is True and book.remove("zed@example.test") is False
    data = json.loads((box.root / "contacts.json").read_text())
    assert [x["address"] for x in data["contacts"]] == ["peer@example.test"]
    assert [p for p in os.listdir(box.root) if p.endswith(".tmp")] == []
    with pytest.raises(UsageError, match="address: several"):
        book.add("a@example.test, b@example.test")
    with pytest.raises(UsageError, match="name"):
        book.add("ok@example.test", name="x\r\ny")
    with pytest.raises(UsageError, match="no contact"):
        book.edit("nobody@example.test", name="n")


async def test_imap_ingest_into_mailbox_loses_nothing(box: Mailbox) -> None:
    """Dovecot → ImapSource → mailbox inbox: exact bytes, malformed mail included, each once."""
    with running_dovecot() as dovecot:
        dovecot.deliver("alice", mail(1))
        dovecot.deliver("alice", b"Subject: broken\r\nContent-Type: multipart/mixed\r\n\r\n\xff garbage\r\n")
        cfg = ImapConfig(host=dovecot.host, port=dovecot.imap_port, user="alice", password="secret")
        src = ImapSource(cfg)
        assert await src.sync_once(box.imap_consumer) == 2
        assert await src.sync_once(box.imap_consumer) == 0
        client = aioimaplib.IMAP4(dovecot.host, dovecot.imap_port, timeout=60)
        await client.wait_hello_from_server()
        await client.login("alice", "secret")
        await client.select("INBOX")
        resp = await client.uid("fetch", "1:*", "(UID FLAGS)")
        await client.logout()
        flags = [bytes(x).decode() for x in resp.lines if b"FETCH" in bytes(x)]
        assert "$EnvelopayProcessed" in flags[0] and "$EnvelopayMalformed" not in flags[0]
        assert "$EnvelopayProcessed" in flags[1] and "$EnvelopayMalformed" in flags[1]
    recs = box.check(flt=CheckFilter(sort="oldest"))
    assert [r.subject for r in recs] == ["note 1", "broken"]
    assert box.raw(recs[0].id).endswith(mail(1))
    assert recs[1].status == "malformed"


async def test_inbox_can_be_the_garden_maildir(tmp_path: Path, clock: Clock) -> None:
    """Garden LMTP → <root>/<address>/ → the engine's pickup moves it to cur/ → the mailbox
    still finds and reads the same file."""
    from envelopay.mail.garden import GardenServer, deliver
    from envelopay.mail.maildir import Pickup, mailbox_path

    root = tmp_path / "garden"
    async with GardenServer(root, [ME], fsync=False, open_garden=True) as garden:
        result = await deliver(mail(1), "peer@example.test", [ME], garden.endpoint)
        assert result.delivered == [ME] or ME in result.delivered
    inbox = mailbox_path(root, ME)
    box = Mailbox(tmp_path / "agent", address=ME, now=clock, inbox=inbox)
    try:
        [rec] = box.refresh()
        assert rec.subject == "note 1" and box.raw(rec.id).endswith(mail(1))
        async with Pickup([inbox], use_inotify=False) as pickup:
            delivery = await pickup.next(timeout=30)
            pickup.done(delivery, flags="S")
        assert os.listdir(inbox / "new") == []
        assert box.raw(rec.id).endswith(mail(1))  # followed into cur/
        assert box.refresh() == []
        [arch] = box.archive([rec.id])
        assert arch.folder == "archive" and os.listdir(inbox / "cur") == []
    finally:
        box.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=st.one_of(
        st.binary(max_size=2000),
        st.builds(
            lambda head, body: head + b"\r\n\r\n" + body,
            st.lists(
                st.sampled_from(
                    [
                        b"From: a@example.test",
                        b"From: <<>>",
                        b"Subject: =?utf-8?B?////?=",
                        b"Content-Type: multipart/mixed; boundary=x",
                        b"Content-Type: text/plain; charset=nonexistent",
                        b"Content-Transfer-Encoding: base64",
                        b"Message-ID: <x@y>",
                        b"References: <a@b> garbage <c@d",
                        b"To: , ,",
                    ]
                ),
                max_size=8,
            ).map(b"\r\n".join),
            st.binary(max_size=500),
        ),
    )
)
def test_any_bytes_are_stored_and_listed(box: Mailbox, raw: bytes) -> None:
    rec = box.deliver(raw)
    assert box.raw(rec.id) == raw
    assert rec.status in ("ok", "malformed")
    assert box.get(rec.id).id == rec.id


def test_two_mailbox_handles_index_each_file_once(tmp_path: Path, clock: Clock) -> None:
    """A CLI `check` refreshing while `mail fetch` stores: the same file is indexed once."""
    one = Mailbox(tmp_path / "agent", address=ME, now=clock)
    two = Mailbox(tmp_path / "agent", address=ME, now=clock)
    try:
        path = deliver_file(one.folder_path("inbox"), mail(1, attachment=("a.txt", b"x")), fsync=False)
        [seen_by_two] = two.refresh()
        rec = one._index_file("inbox", path)  # the delivering handle indexes after the other one
        assert rec.id == seen_by_two.id
        assert len(one.check()) == 1
        assert os.listdir(one.root / "attachments") == [rec.id]
    finally:
        one.close()
        two.close()


# ------------------------------------------------------------------ the mailbox's rooms
def test_pure_rooms_do_no_io() -> None:
    """inputs, records, interpret and threads are pure: none imports a module that does I/O,
    nor a mailbox room that does."""
    import ast

    import envelopay.mail.mailbox as pkg

    room = Path(pkg.__file__).parent
    doing_io = ("storage", "index", "guard", "attachments", "outgoing", "actions")
    io_rooms = {f"envelopay.mail.mailbox.{m}" for m in doing_io}
    io_modules = {"os", "shutil", "sqlite3", "socket", "asyncio", "envelopay.mail.maildir"} | io_rooms
    for name in ("inputs", "records", "interpret", "threads"):
        tree = ast.parse((room / f"{name}.py").read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert imported & io_modules == set(), name
        assert "envelopay.mail.mailbox.inputs" in imported or name == "inputs"  # the checker sees imports


def test_thread_groups_join_through_any_shared_message_id() -> None:
    from envelopay.mail.mailbox.threads import ThreadLink, thread_groups

    links = [
        ThreadLink("a", "<1@x>", None, []),
        ThreadLink("c", "<3@x>", "<2@x>", ["<1@x>", "<2@x>"]),  # its parent <2@x> was never received
        ThreadLink("d", "<4@x>", None, []),
        ThreadLink("b", None, "<3@x>", []),  # no Message-ID of its own
    ]
    groups = thread_groups(links)
    assert list(groups) == ["a", "c", "d", "b"]
    assert groups["a"] == groups["b"] == groups["c"] != groups["d"]


def test_maildir_moves_keep_or_set_flags(tmp_path: Path) -> None:
    from envelopay.mail.mailbox.storage import MailFolders

    folders = MailFolders(tmp_path)
    fresh = folders.store("inbox", b"Subject: one\r\n\r\nx\r\n")
    name = fresh.name
    assert folders.find("inbox", name) == fresh
    archived = folders.move(fresh, "archive")
    assert archived == folders.path("archive") / "cur" / f"{name}:2,"
    assert folders.find("inbox", name) is None and folders.find("archive", name) == archived
    sent = folders.move(archived, "sent", flags="S")
    assert sent.name == f"{name}:2,S" and folders.find("sent", name) == sent
    assert folders.move(sent, "archive").name == f"{name}:2,S"  # its own flags kept
    assert [(f, p.name) for f, p in folders.files()] == [("archive", f"{name}:2,S")]
