"""Robots answering robots (issue 29, items 9 and 10), over SQLite and PostgreSQL.

RFC 3834: every answer the engine writes carries `Auto-Submitted: auto-replied` (signed);
mail that says it is automatic, list or bulk mail, a null return path or a robot's
address is read and processed but never answered (the answer is held in the outbox, with
the reason); a per-peer rate limit and a per-thread loop detector, counted in the ledger,
stop the loops that a robot which does not mark its mail would start. A protocol message
with no single sender is quarantined with its reason, not dropped unrecorded.

Before: the engine answered all of these, marked none of its answers, and returned
`ignored` (nothing recorded) for two From fields.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests._engines import worker

from envelopay import dkim
from envelopay.engine import Engine, Outcome
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import AnswerLimits, ProofKey, Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Fulfill, Invoice, Methods, Oops, OopsError, Order, Which
from envelopay.protocol.parse import parse
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


def with_headers(raw: bytes, *lines: str) -> bytes:
    """`raw` with header `lines` added at the top of its header block."""
    return "".join(f"{line}\r\n" for line in lines).encode() + raw


def held_row(store: Store, outcome: Outcome) -> Any:
    """The one outbox row a held answer left, found through the flow log."""
    assert outcome.flow_id is not None
    outs = [e for e in store.flow_log(outcome.flow_id) if e.direction == "out"]
    row = store.outbox_get(outs[-1].message_id or "")
    assert row is not None
    return row


# ------------------------------------------------------------------ marking our answers


async def test_every_answer_is_marked_auto_replied_and_signed(store: Store) -> None:
    rail = k.DictRail()
    eng = worker(store, rail)
    out = await eng.handle(k.raw(k.order("ord_1"), message_id="<o1@client.test>"))
    row = store.outbox_get(out.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Invoice)
    assert row.outbound.auto_submitted == "auto-replied"  # stored with the row (both backends)
    raw = compose(row.outbound)
    assert b"\r\nAuto-Submitted: auto-replied\r\n" in raw
    # The header is oversigned: a receiver sees a signature break if it is removed or
    # a second one is added.
    key = dkim.DkimKey.generate_ed25519()
    signed = dkim.sign(raw, selector="s", domain="garden.test", key=key)
    head = re.sub(rb"\r\n[ \t]+", b"", signed.split(b"\r\n\r\n")[0])  # unfolded
    sig = next(line for line in head.split(b"\r\n") if line.startswith(b"DKIM-Signature:"))
    signed_names = re.search(rb"h=([^;]*);", sig)
    assert signed_names is not None
    assert signed_names.group(1).split(b":").count(b"auto-submitted") == 2
    # An OOPS is an answer too.
    bad = await eng.handle(k.raw(k.order("ord_2", op="nope"), message_id="<o2@client.test>"))
    oops_row = store.outbox_get(bad.outbox[0])
    assert oops_row is not None and oops_row.outbound.auto_submitted == "auto-replied"


async def test_a_send_a_person_asked_for_is_not_marked(store: Store) -> None:
    buyer = Engine(store, address=k.BUYER, domain="client.test", rails={}, app=WorkerApp(), clock=k.Clock())
    sent = await buyer.send(Order(id="ord_p", task={"op": "echo"}), k.WORKER)
    row = store.outbox_get(sent.message_id)
    assert row is not None and row.outbound.auto_submitted is None
    assert b"Auto-Submitted" not in compose(row.outbound)


# ------------------------------------------------------------------ RFC 3834 signals

SIGNALS: dict[str, tuple[tuple[str, ...], str, str]] = {
    # name: (header lines, From, reason)
    "auto_replied": (("Auto-Submitted: auto-replied",), k.BUYER, "auto_submitted"),
    "auto_generated": (("Auto-Submitted: auto-generated",), k.BUYER, "auto_submitted"),
    "auto_notified": (("Auto-Submitted: Auto-Notified; owner-email=a@b.test",), k.BUYER, "auto_submitted"),
    "precedence_list": (("Precedence: list",), k.BUYER, "precedence_list"),
    "precedence_bulk": (("Precedence: BULK",), k.BUYER, "precedence_bulk"),
    "precedence_junk": (("Precedence: junk",), k.BUYER, "precedence_junk"),
    "list_id": (("List-Id: Agents <agents.lists.test>",), k.BUYER, "list_mail"),
    "list_unsubscribe": (("List-Unsubscribe: <mailto:leave@lists.test>",), k.BUYER, "list_mail"),
    "list_post": (("List-Post: <mailto:agents@lists.test>",), k.BUYER, "list_mail"),
    "x_autoreply": (("X-Autoreply: yes",), k.BUYER, "auto_submitted"),
    "null_return_path": (("Return-Path: <>",), k.BUYER, "null_return_path"),
    "mailer_daemon": ((), "MAILER-DAEMON@client.test", "robot_sender"),
    "owner_prefix": ((), "owner-agents@client.test", "robot_sender"),
    "request_suffix": ((), "agents-request@client.test", "robot_sender"),
}


@pytest.mark.parametrize("case", sorted(SIGNALS))
async def test_each_rfc3834_signal_holds_the_answer_and_records_it(store: Store, case: str) -> None:
    lines, sender, reason = SIGNALS[case]
    eng = worker(store, k.DictRail())
    raw = with_headers(k.raw(k.order("ord_s"), sender=sender, message_id="<s1@client.test>"), *lines)
    out = await eng.handle(raw)
    # Read and processed: the flow is open and invoiced; only the answer is held.
    assert (out.status, out.state, out.unanswered, out.outbox) == ("processed", "invoiced", reason, ())
    recorded = store.inbound_outcome(k.WORKER, "<s1@client.test>")
    assert recorded is not None and recorded["unanswered"] == reason
    assert store.outbox_pending(k.T0 + timedelta(days=1)) == []  # nothing goes out
    row = held_row(store, out)
    assert (row.status, row.last_error) == ("held", reason)
    assert isinstance(row.outbound.message, Invoice)  # the answer is kept, not lost
    assert out.flow_id is not None
    marks = [e.verdict for e in store.flow_log(out.flow_id) if e.direction == "out"]
    assert marks == [{"status": "unanswered", "reason": reason}]  # visible in `envelopay show`
    # The same mail again is the recorded outcome, still unanswered.
    again = await eng.handle(raw)
    assert (again.repeat, again.unanswered, again.outbox) == ("message_id", reason, ())


async def test_auto_submitted_no_is_answered(store: Store) -> None:
    eng = worker(store, k.DictRail())
    raw = with_headers(k.raw(k.order("ord_n")), "Auto-Submitted: no", "Precedence: first-class")
    out = await eng.handle(raw)
    assert out.unanswered is None and len(out.outbox) == 1


async def test_a_refusal_to_list_mail_is_held_too(store: Store) -> None:
    """The OOPS an early refusal would send (no flow) is held like any answer."""
    eng = worker(store, k.DictRail())
    out = await eng.handle(with_headers(k.raw(k.order("ord_x", op="nope"), message_id="<x1@client.test>"),
                                        "List-Id: <agents.lists.test>"))
    assert (out.oops, out.unanswered, out.outbox) == (OopsCode.UNKNOWN_TASK, "list_mail", ())
    assert store.outbox_pending(k.T0 + timedelta(days=1)) == []


LIST_PAY = """From: buyer@client.test\r
To: worker@garden.test\r
Subject: [agents] PAY\r
Message-ID: <lp1@client.test>\r
In-Reply-To: {irt}\r
List-Id: Agents <agents.lists.test>\r
List-Unsubscribe: <mailto:agents-leave@lists.test>\r
Precedence: list\r
MIME-Version: 1.0\r
Content-Type: text/plain; charset=utf-8\r
\r
{body}\r
_______________________________________________\r
agents mailing list -- agents@lists.test\r
To unsubscribe send an email to agents-leave@lists.test\r
"""


async def test_a_list_tagged_pay_is_read_and_paid_but_never_answered(store: Store) -> None:
    rail = k.DictRail({"tl": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    eng = worker(store, rail)
    o = await eng.handle(k.raw(k.order("ord_l"), message_id="<ol@client.test>"))
    inv_row = store.outbox_get(o.outbox[0])
    assert inv_row is not None and isinstance(inv_row.outbound.message, Invoice)
    pay = k.pay("pay_l", "tl", invoice_ref=inv_row.outbound.message.id)
    body = pay.model_dump_json(exclude_none=True)
    raw = LIST_PAY.format(irt=inv_row.outbound.message_id, body=body).encode()
    p = await eng.handle(raw)
    # Read through the tag and the footer; the flow advances and the money is recorded.
    assert (p.status, p.state, p.flow_id) == ("processed", "fulfilled", o.flow_id)
    assert p.verdict is not None and p.verdict["status"] == "ok"
    assert store.proof_status(ProofKey(k.CHAIN, "tl")) == "spent"
    # Never answered onto the list: the FULFILL is held, with the reason.
    assert (p.unanswered, p.outbox) == ("precedence_list", ())
    row = held_row(store, p)
    assert isinstance(row.outbound.message, Fulfill) and row.status == "held"


# ------------------------------------------------------------------ never OOPS an OOPS

OOPS_FAMILY = {
    "valid_no_flow": Oops(id="oops_1", note="no", error=OopsError(code="unknown_task")).model_dump_json(),
    "unknown_ref": Oops(id="oops_2", note="x", error=OopsError(code="bad"), ref="ord_z").model_dump_json(),
    "bad_json": "{not json",
    "missing_fields": '{"v":"0.1.0","type":"oops"}',
    "wrong_version": '{"v":"9.0.0","type":"oops","id":"oops_3","error":{"code":"x"}}',
    "type_mismatch": '{"v":"0.1.0","type":"order","id":"ord_9","task":{}}',
}


def plain(subject: str, body: str, mid: str, sender: str = k.BUYER) -> bytes:
    return (
        f"From: {sender}\r\nTo: {k.WORKER}\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n"
    ).encode()


@pytest.mark.parametrize("case", sorted(OOPS_FAMILY))
async def test_no_oops_is_ever_answered(store: Store, case: str) -> None:
    # No limits and no Auto-Submitted header: the rule alone keeps the silence.
    eng = worker(store, k.DictRail(), answer_limits=None)
    out = await eng.handle(plain("OOPS", OOPS_FAMILY[case], f"<oo.{case}@client.test>"))
    assert out.outbox == () and out.unanswered is None, out
    assert store.outbox_pending(k.T0 + timedelta(days=1)) == []


async def test_an_oops_inside_a_flow_is_not_answered(store: Store) -> None:
    eng = worker(store, k.DictRail(), answer_limits=None)
    o = await eng.handle(k.raw(k.order("ord_f"), message_id="<of@client.test>"))
    inv = store.outbox_get(o.outbox[0])
    assert inv is not None
    assert isinstance(inv.outbound.message, Invoice)
    oops = Oops(id="oops_f", note="no", error=OopsError(code="amount_mismatch"), ref=inv.outbound.message.id)
    out = await eng.handle(k.raw(oops, in_reply_to=inv.outbound.message_id))
    assert out.flow_id == o.flow_id and out.outbox == ()


# ------------------------------------------------------------------ limits in the ledger


def reopen(store: Store) -> Store:
    """The same ledger from a new store object (a restarted process)."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path)
    assert isinstance(store, PostgresStore)
    return PostgresStore(store.dsn, max_size=2)


async def test_the_loop_detector_holds_across_a_restart(store: Store) -> None:
    """A robot that does not mark its mail answers each METHODS with a WHICH in the
    thread: the worker answers `per_thread` of them, then holds its answers, also after
    a restart (a new process on the same ledger), until the window has passed."""
    limits = AnswerLimits(per_peer=100, per_thread=3, window=timedelta(minutes=10))
    clock = k.Clock()
    eng = Engine(store, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(), clock=clock,
                 answer_limits=limits)
    first = "<t0@client.test>"
    refs: tuple[str, ...] = ()
    irt: str | None = None
    outcomes = []
    for i in range(5):
        mid = first if i == 0 else f"<t{i}@client.test>"
        out = await eng.handle(k.raw(Which(id=f"w{i}"), message_id=mid, in_reply_to=irt, references=refs))
        outcomes.append(out)
        if out.outbox:
            row = store.outbox_get(out.outbox[0])
            assert row is not None and isinstance(row.outbound.message, Methods)
            irt, refs = row.outbound.message_id, (*row.outbound.references, row.outbound.message_id)
        else:
            irt, refs = mid, (*refs, mid)  # the robot goes on in the thread
    assert [o.unanswered for o in outcomes] == [None, None, None, "loop_detected", "loop_detected"]
    # A restarted worker (another store object, another worker id) still counts them.
    other = reopen(store)
    try:
        again = Engine(other, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(),
                       clock=clock, answer_limits=limits)
        out = await again.handle(k.raw(Which(id="w5"), message_id="<t5@client.test>", in_reply_to=irt,
                                       references=refs))
        assert out.unanswered == "loop_detected"
        clock.now += timedelta(minutes=11)  # the window has passed: answered again
        out = await again.handle(k.raw(Which(id="w6"), message_id="<t6@client.test>", in_reply_to=irt,
                                       references=refs))
        assert out.unanswered is None and len(out.outbox) == 1
    finally:
        other.close()


async def test_the_rate_limit_is_per_peer(store: Store) -> None:
    limits = AnswerLimits(per_peer=2, per_thread=0, window=timedelta(hours=1))
    eng = Engine(store, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(), clock=k.Clock(),
                 answer_limits=limits)
    got = [(await eng.handle(k.raw(Which(id=f"r{i}")))).unanswered for i in range(4)]
    assert got == [None, None, "rate_limited", "rate_limited"]
    other = await eng.handle(k.raw(Which(id="r-other"), sender="carol@client.test"))
    assert other.unanswered is None and len(other.outbox) == 1  # another peer is not limited


async def test_a_redone_step_draws_its_answer_once(store: Store) -> None:
    """The draw is keyed by the inbound Message-ID: drawing again for the same message
    (a step redone after a conflict or a crash) does not count twice."""
    limits = AnswerLimits(per_peer=1, per_thread=0)
    now = k.T0
    assert store.answer_take(k.WORKER, k.BUYER, "<t>", "<m1>", now, limits) == "ok"
    assert store.answer_take(k.WORKER, k.BUYER, "<t>", "<m1>", now, limits) == "ok"
    assert store.answer_take(k.WORKER, k.BUYER, "<t>", "<m2>", now, limits) == "rate_limited"


# ------------------------------------------------------------------ item 10: ambiguous From

AMBIGUOUS = {
    "two_from_fields": (("From: buyer@client.test", "From: mallory@evil.test"), "2 From fields"),
    "two_mailboxes": (("From: buyer@client.test, mallory@evil.test",), "From names 2 mailboxes"),
    "no_from": ((), "no From field"),
    "unreadable": (("From: not an address",), "From names no address that can be read"),
}


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
async def test_an_ambiguous_from_is_quarantined_with_its_reason(store: Store, case: str) -> None:
    froms, why = AMBIGUOUS[case]
    body = '{"v":"0.1.0","type":"order","id":"ord_a","task":{"op":"echo"}}'
    raw = ("\r\n".join(froms) + ("\r\n" if froms else "")).encode() + (
        f"To: {k.WORKER}\r\nSubject: ORDER\r\nMessage-ID: <amb.{case}@client.test>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n"
    ).encode()
    assert parse(raw).from_problem == why
    eng = worker(store, k.DictRail())
    out = await eng.handle(raw)
    assert (out.status, out.outbox) == ("quarantined", ())
    assert out.detail == f"ambiguous sender: {why}"
    recorded = store.inbound_outcome(k.WORKER, f"<amb.{case}@client.test>")
    assert recorded is not None and recorded["status"] == "quarantined" and why in recorded["detail"]
    assert store.outbox_pending(k.T0 + timedelta(days=1)) == []
    again = await eng.handle(raw)  # the same mail again: the record, not a second quarantine
    assert (again.status, again.repeat) == ("quarantined", "message_id")


async def test_non_protocol_mail_with_two_froms_is_still_ignored(store: Store) -> None:
    eng = worker(store, k.DictRail())
    raw = plain("lunch?", "see you", "<np@client.test>").replace(
        b"From: buyer@client.test\r\n", b"From: a@client.test\r\nFrom: b@client.test\r\n"
    )
    out = await eng.handle(raw)
    assert (out.status, out.outbox) == ("ignored", ())  # not our mail: not quarantined, never answered


# ------------------------------------------------------------------ configuration


def test_the_limits_come_from_the_worker_config() -> None:
    from envelopay.config import config_from_dict
    from envelopay.errors import ConfigError
    from envelopay.node.agent_node import answer_limits

    agent = {"address": "worker@garden.test", "domain": "garden.test"}
    assert answer_limits(config_from_dict({"agent": agent})) == AnswerLimits()
    cfg = config_from_dict({"agent": agent, "answers": {"per_peer": 5, "per_thread": 0, "window": 60}})
    assert answer_limits(cfg) == AnswerLimits(per_peer=5, per_thread=0, window=timedelta(seconds=60))
    for bad in ({"per_peer": -1}, {"window": 0}, {"window": float("inf")}, {"per_thread": "x"}, {"burst": 3}):
        with pytest.raises(ConfigError, match="answers"):
            config_from_dict({"agent": agent, "answers": bad})


def test_workers_on_one_ledger_share_the_counts(store: Store) -> None:
    """Four processes' stores drawing at once, each for the same 40 peers in the same
    order, one answer per peer allowed: exactly one draw per peer wins (each draw is
    serialized per peer: SQLite's write lock, PostgreSQL's advisory lock). Without the
    lock, PostgreSQL let 31 and 36 of the 40 peers draw twice or more in two runs."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    limits = AnswerLimits(per_peer=1, per_thread=0)
    stores = [store, *(reopen(store) for _ in range(3))]
    start = threading.Barrier(len(stores))

    def draws(n: int) -> list[tuple[int, str]]:
        start.wait()
        s = stores[n]
        return [(p, s.answer_take(k.WORKER, f"p{p}@client.test", "<t>", f"<m{n}.{p}>", k.T0, limits))
                for p in range(40)]

    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            got = [v for part in pool.map(draws, range(len(stores))) for v in part]
    finally:
        for other in stores[1:]:
            other.close()
    wins = [sum(1 for p, v in got if p == peer and v == "ok") for peer in range(40)]
    assert wins == [1] * 40


# ------------------------------------------------------------------ email-as-tool responders


@pytest.mark.parametrize("signal", ["Auto-Submitted: auto-replied", "Precedence: bulk", "List-Id: <l.test>",
                                    "Return-Path: <>"])
def test_a_responder_marks_its_answers_and_never_answers_a_robot(signal: str) -> None:
    from datetime import UTC, datetime

    from envelopay.endpoints.reference import reference_responder
    from envelopay.endpoints.toolmail import build_tool_mail

    kv = reference_responder("garden.local")
    now = datetime(2026, 12, 1, tzinfo=UTC)
    request = build_tool_mail(sender="agent@garden.local", recipient=kv.address, subject="CALL kv",
                              payload={"key": "spec.version"}, human="a call", message_id="<c1@garden.local>",
                              now=now, call_id="c1")
    reply = kv.respond(request, now=now, domain="garden.local")
    assert reply is not None and b"\nAuto-Submitted: auto-replied\n" in reply.replace(b"\r\n", b"\n")
    assert kv.respond(f"{signal}\r\n".encode() + request, now=now, domain="garden.local") is None


# ------------------------------------------------------------------ AgentMail carries the mark


@pytest.mark.parametrize("via", ["send", "endpoint"])
async def test_agentmail_sends_our_auto_submitted_header(store: Store, via: str) -> None:
    """AgentMail composes its own bytes from our fields: the mark must be one of them,
    whether we send a new message or answer through its reply endpoint."""
    import json
    from typing import Literal
    from urllib.parse import quote

    import respx

    from envelopay.mail.agentmail.client import API_BASE, AgentMailClient, AgentMailConfig
    from envelopay.mail.agentmail.transport import AgentMailTransport

    inbox = "worker@agentmail.to"
    eng = Engine(store, address=inbox, domain="agentmail.to", rails={}, app=WorkerApp(), clock=k.Clock())
    out = await eng.handle(k.raw(Which(id="w_am"), to=inbox, message_id="<am1@client.test>"))
    row = store.outbox_get(out.outbox[0])
    assert row is not None
    base = f"{API_BASE}/v0/inboxes/{quote(inbox, safe='')}/messages"
    url = f"{base}/send"
    if via == "endpoint":  # AgentMail's id of the mail answered is known: its reply endpoint
        am_id = "<0100019a-inbound@email.agentmail.to>"
        store.event_done(f"agentmail-id:{inbox}", "<am1@client.test>", k.T0, {"message_id": am_id})
        url = f"{base}/{quote(am_id, safe='')}/reply"
    mode: Literal["send", "endpoint"] = "endpoint" if via == "endpoint" else "send"
    client = AgentMailClient(AgentMailConfig(inbox, "am_test_key"))
    try:
        with respx.mock(assert_all_called=True) as router:
            route = router.post(url).respond(json={"message_id": "am_1", "thread_id": "th_1"})
            transport = AgentMailTransport(client, store, k.Clock(), reply_via=mode)
            await transport.send(compose(row.outbound), inbox, k.BUYER)
    finally:
        await client.aclose()
    headers = json.loads(route.calls.last.request.content)["headers"]
    assert headers["Auto-Submitted"] == "auto-replied"


async def test_envelopay_show_marks_the_answer_not_sent(store: Store) -> None:
    from envelopay.client import views

    eng = worker(store, k.DictRail())
    out = await eng.handle(with_headers(k.raw(k.order("ord_v")), "Precedence: bulk"))
    assert out.flow_id is not None
    rows = views.show_rows(store.flow_log(out.flow_id))
    shown = [(r[1], r[2], r[4]) for r in rows]
    assert shown == [("in", "ORDER", ""), ("out", "INVOICE", "unanswered (precedence_bulk)")]


async def test_envelopay_outbox_lists_the_answers_held(store: Store, tmp_path: Path) -> None:
    from envelopay.client import commands, views
    from envelopay.config import config_from_dict

    eng = worker(store, k.DictRail())
    held = await eng.handle(with_headers(k.raw(k.order("ord_h")), "List-Id: <l.test>"))
    sent = await eng.handle(k.raw(k.order("ord_g")))
    ledger = store.path if isinstance(store, SqliteStore) else store.dsn  # type: ignore[attr-defined]
    cfg = config_from_dict({"agent": {"address": k.WORKER, "domain": "garden.test", "ledger": ledger}},
                           base_dir=tmp_path)
    rows = commands.outbox(cfg)
    assert [(r.status, r.last_error) for r in rows] == [("pending", None), ("held", "list_mail")]
    assert rows[0].outbound.message_id == sent.outbox[0] and held.flow_id == rows[1].flow_id
    assert views.outbox_doc(rows)["queued"][1]["status"] == "held"


async def test_an_oops_still_answers_a_marked_message_but_not_list_mail(store: Store) -> None:
    """A peer's worker marks all its answers; refusing one must reach it (its flow waits
    on the OOPS), and an OOPS is never answered, so it cannot loop. List mail gets none."""
    eng = worker(store, k.DictRail())
    marked = with_headers(k.raw(k.order("ord_m", op="nope")), "Auto-Submitted: auto-replied")
    out = await eng.handle(marked)
    assert (out.oops, out.unanswered, len(out.outbox)) == (OopsCode.UNKNOWN_TASK, None, 1)
    listed = with_headers(k.raw(k.order("ord_k", op="nope")), "Auto-Submitted: auto-replied", "List-Id: <l>")
    assert (await eng.handle(listed)).unanswered == "list_mail"  # marked and listed: no OOPS
    bulk = with_headers(k.raw(k.order("ord_b", op="nope")), "Precedence: bulk")
    assert (await eng.handle(bulk)).unanswered == "precedence_bulk"


async def test_the_limits_never_hold_what_a_payment_bought(store: Store) -> None:
    """Past both limits, a verified PAY still gets its FULFILL (the money moved: the
    answer is owed); an unpaid message to the same peer is held."""
    rail = k.DictRail({"tp": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    eng = worker(store, rail, answer_limits=AnswerLimits(per_peer=1, per_thread=1))
    o = await eng.handle(k.raw(k.order("ord_p"), message_id="<op@client.test>"))
    inv = store.outbox_get(o.outbox[0])
    assert inv is not None and isinstance(inv.outbound.message, Invoice)
    pay = k.pay("pay_p", "tp", invoice_ref=inv.outbound.message.id)
    p = await eng.handle(k.raw(pay, in_reply_to=inv.outbound.message_id, references=("<op@client.test>",)))
    assert (p.state, p.unanswered, len(p.outbox)) == ("fulfilled", None, 1)
    fulfil = store.outbox_get(p.outbox[0])
    assert fulfil is not None and isinstance(fulfil.outbound.message, Fulfill) and fulfil.status == "pending"
    later = await eng.handle(k.raw(Which(id="w_after")))
    assert later.unanswered == "rate_limited"


async def test_the_serve_log_says_what_was_not_answered_and_what_was_quarantined(store: Store) -> None:
    from datetime import UTC, datetime

    from envelopay.node.observe import Handled
    from envelopay.node.serve_log import ServeLog

    eng = worker(store, k.DictRail())
    held = await eng.handle(with_headers(k.raw(k.order("ord_sl")), "Precedence: list"))
    two = b"From: a@client.test\r\nFrom: b@client.test\r\n" + plain("ORDER", '{"v":"0.1.0"}', "<q@c.test>")
    quarantined = await eng.handle(two)
    lines: list[str] = []
    log = ServeLog(lines.append, "text")
    at = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
    for out in (held, quarantined):
        log(Handled(at, "order", k.BUYER, out, 0.001, None))
    assert "outcome=processed" in lines[0] and lines[0].endswith("unanswered=precedence_list ms=1.0")
    assert 'outcome=quarantined why="ambiguous sender: 3 From fields"' in lines[1]
    as_json = ServeLog(lines.append, "json")
    as_json(Handled(at, "order", k.BUYER, held, 0.001, None))
    assert json.loads(lines[-1])["unanswered"] == "precedence_list"
