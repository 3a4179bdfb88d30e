"""Issue 11 against the enforcer, on both stores: duplicate sends across processes (item
5), poison requests (item 6), kill at delivery and encoded-word subjects (item 8)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.model import Disposition, SendRequest
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport

from .conftest import Clock, Sink

PEER = "bob@partner.test"


def req(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"to": PEER, "from": "a1@agents.test", "subject": "hello", "text": "hi there"}
    return {**base, **changes}


async def make(enf: Enforcer, name: str = "a1") -> str:
    _, token = await enf.create_agent(name, f"{name}@agents.test", allow=("partner.test",))
    return token


async def counters(store: EnforcerStore) -> int:
    rows = await store.execute_sql("SELECT COALESCE(SUM(sends), 0) FROM enf_counters", ())
    return int(rows[0][0])


def _twin(store: EnforcerStore) -> EnforcerStore:
    """Another connection to the same database: what a second enforcer process opens."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path)
    assert isinstance(store, PostgresStore)
    return PostgresStore(store.dsn, max_size=2)


async def _concurrent_sends(
    store: EnforcerStore, sink: Sink, clock: Clock, token: str, body: dict[str, Any], n: int
) -> list[Disposition]:
    """`n` enforcers, each on its own thread, event loop and database connection, send
    `body` at the same moment (a barrier releases them together)."""
    barrier = threading.Barrier(n)

    def one() -> Disposition:
        async def go() -> Disposition:
            st = _twin(store)
            await st.open()
            deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
            enf = Enforcer(st, deliverer, clock=clock)
            try:
                await asyncio.to_thread(barrier.wait)
                return await enf.send(token, body)
            finally:
                await deliverer.close()
                await st.close()

        return asyncio.run(go())

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(n) as pool:
        return list(await asyncio.gather(*(loop.run_in_executor(pool, one) for _ in range(n))))


async def test_eight_concurrent_sends_with_one_message_id_deliver_once(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer)
    body = req(message_id="<row-7@agents.test>")
    answers = await _concurrent_sends(store, sink, clock, token, body, 8)
    assert len(sink.messages) == 1  # the old read-then-insert check delivered 8
    sent = [a for a in answers if a.status == "sent"]
    assert sent and all(a.message_id == "<row-7@agents.test>" for a in sent)
    assert all(a.status == "sent" or a.code in ("in_flight", "duplicate") for a in answers), answers
    # Once recorded, every retry is answered from the record, with the same id.
    again = await enforcer.send(token, body)
    assert again.status == "sent" and again.id in {a.id for a in sent if a.id}
    assert len(sink.messages) == 1 and await counters(store) == 2  # one hourly + one daily slot


async def test_sixteen_concurrent_identical_sends_deliver_once(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer)
    answers = await _concurrent_sends(store, sink, clock, token, req(text="same body"), 16)
    assert len(sink.messages) == 1  # the old read-then-write guard delivered 16
    assert [a.status for a in answers].count("sent") == 1
    assert all(a.status == "sent" or (a.status, a.code) == ("blocked", "duplicate") for a in answers)
    assert await counters(store) == 2  # a refused duplicate takes no slot


async def test_a_failed_send_frees_its_message_id_and_body_for_a_retry(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink
) -> None:
    token = await make(enforcer)
    body = req(message_id="<row-9@agents.test>")
    sink.fail_with = "451 try later"
    assert (await enforcer.send(token, body)).status == "failed"
    sink.fail_with = None
    assert (await enforcer.send(token, body)).status == "sent"
    assert len(sink.messages) == 1


async def test_a_claim_left_by_a_crash_is_stale_after_the_claim_timeout(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer)
    agent = (await enforcer.list_agents())[0]
    # A process claimed the Message-ID and died before recording anything.
    assert await store.claim(agent.id, "msgid", "<row-3@agents.test>", "dead", clock.now, clock.now - 300)
    body = req(message_id="<row-3@agents.test>")
    busy = await enforcer.send(token, body)
    assert (busy.status, busy.code) == ("failed", "in_flight") and sink.messages == []
    assert await counters(store) == 0
    clock.now += 301
    assert (await enforcer.send(token, body)).status == "sent" and len(sink.messages) == 1


# -- item 6: poison requests are refused with a code, before any cap ---------------------


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"subject": "caf\udcff"}, "not_composable"),
        ({"text": "lone \udcff surrogate"}, "not_composable"),
        # Both passed the policy check and failed compose after a cap was taken.
        ({"type": "which", "body": {"v": "0.1.0", "type": "which"}, "in_reply_to": "<no-at-sign>"},
         "not_composable"),
        ({"type": "which", "body": {"v": "0.1.0", "type": "which"}, "subject": "x" * 900}, "not_composable"),
    ],
)
async def test_what_compose_refuses_is_refused_before_any_cap(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, changes: dict[str, Any], code: str
) -> None:
    token = await make(enforcer)
    d = await enforcer.send(token, req(**changes))
    assert (d.status, d.code) == ("blocked", code), d
    assert await counters(store) == 0 and sink.messages == []
    rows = await store.execute_sql("SELECT COUNT(*) FROM enf_claims", ())
    assert rows[0][0] == 0  # no claim left behind either


async def test_approving_a_row_that_cannot_compose_ends_failed_with_its_reason(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer)
    agent = (await enforcer.list_agents())[0]
    assert token
    # A row queued before this check existed: its subject cannot be encoded.
    bad = SendRequest(to=PEER, sender="a1@agents.test", text="x", subject="caf\udcff")
    await store.insert_send(id="q1", agent_id=agent.id, state="PENDING", reason="not on the allowlist",
                            request=bad, fingerprint="f", message_id="<q1@agents.test>", now=clock.now)
    decision = await enforcer.approve("q1")  # the old code raised here and left the row APPROVED
    assert decision.state == "FAILED" and "cannot compose" in decision.detail
    row = await store.get_send("q1")
    assert row is not None and row.state == "FAILED" and sink.messages == []


async def test_http_poison_is_a_coded_refusal_not_a_500(
    enforcer: Enforcer, store: EnforcerStore, service: str, sink: Sink
) -> None:
    token = await make(enforcer)
    ok = json.dumps(req())
    bodies = {
        "too_deep": ok[:-1] + ', "x": ' + "[" * 5000 + "]" * 5000 + "}",
        "number_too_long": ok[:-1] + ', "x": ' + "7" * 5000 + "}",
        "invalid_text": ok[:-1] + ', "x": "\\udcff"}',
        "invalid_json": '{"to": 1, "to": 2}',
    }
    async with httpx.AsyncClient(base_url=service, headers={"Authorization": f"Bearer {token}"}) as client:
        for code, text in bodies.items():
            r = await client.post("/v1/send", content=text.encode())
            answer = r.json()
            assert r.status_code == 200 and (answer["status"], answer["code"]) == ("blocked", code), r.text
        surrogate = json.dumps(req(subject="\udcff"))  # json.dumps escapes it as \udcff
        r = await client.post("/v1/send", content=surrogate.encode())
        assert r.status_code == 200 and r.json()["code"] == "invalid_text"
    assert await counters(store) == 0 and sink.messages == []


# -- item 8: kill at delivery; encoded-word subjects --------------------------------------


def _kill_from_outside(store: EnforcerStore, name: str) -> None:
    """The operator's kill, committed by another connection (another process)."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("UPDATE enf_agents SET status = 'KILLED' WHERE name = ?", (name,))
        return
    import psycopg

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.dsn, autocommit=True) as conn:
        conn.execute("UPDATE enf_agents SET status = 'KILLED' WHERE name = %s", (name,))


async def test_a_kill_committed_after_the_caps_stops_the_delivery(
    store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    def signer(raw: bytes) -> bytes:
        _kill_from_outside(store, "a1")  # lands while the send is between caps and DATA
        return raw

    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    enf = Enforcer(store, deliverer, clock=clock, signer=signer)
    try:
        token = await make(enf)
        d = await enf.send(token, req())
    finally:
        await deliverer.close()
    assert (d.status, d.code) == ("blocked", "killed") and sink.messages == []
    assert await counters(store) == 0  # the slots went back


async def test_a_kill_committed_during_execute_stops_an_approved_send(
    store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    kill = {"armed": False}

    def signer(raw: bytes) -> bytes:
        if kill["armed"]:
            _kill_from_outside(store, "a1")
        return raw

    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    enf = Enforcer(store, deliverer, clock=clock, signer=signer)
    try:
        _, token = await enf.create_agent("a1", "a1@agents.test")  # empty allowlist: queued
        queued = await enf.send(token, req())
        assert queued.status == "pending_approval" and queued.id
        kill["armed"] = True
        decision = await enf.approve(queued.id)
    finally:
        await deliverer.close()
    assert decision.state == "FAILED" and "killed" in decision.detail and sink.messages == []


@pytest.mark.parametrize(
    "subject",
    [
        "=?utf-8?q?hi=0D=0ABcc:_victim@evil.test?=",
        "=?utf-8?b?aGkNCkJjYzogdkBldmlsLnRlc3Q=?=",
        "=?bogus?q?x?=",
    ],
)
async def test_an_encoded_word_subject_decoding_to_crlf_is_refused(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, subject: str
) -> None:
    token = await make(enforcer)
    d = await enforcer.send(token, req(subject=subject))
    assert d.status == "blocked" and "subject" in d.reason and sink.messages == []
    assert await counters(store) == 0


async def test_a_harmless_encoded_word_subject_passes_through_as_written(
    enforcer: Enforcer, sink: Sink
) -> None:
    token = await make(enforcer)
    d = await enforcer.send(token, req(subject="=?utf-8?q?caf=C3=A9?="))
    assert d.status == "sent"
    assert b"\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\n" in sink.messages[0][2]


async def test_operator_routes_refuse_poison_json_with_400_not_500(service: str) -> None:
    from .conftest import OPERATOR

    async with httpx.AsyncClient(base_url=service, headers={"Authorization": f"Bearer {OPERATOR}"}) as client:
        for text in ('{"name": ' + "[" * 5000 + "]" * 5000 + "}", '{"hourly": ' + "9" * 5000 + "}"):
            r = await client.post("/v1/agents", content=text.encode())
            assert r.status_code == 400 and r.json()["code"] in ("too_deep", "number_too_long"), r.text


async def test_the_enforcer_authenticates_to_a_garden_with_accounts_and_sends_only_as_its_agents(
    tmp_path: Any, clock: Clock
) -> None:
    from envelopay.enforcer.service.launch import _transport
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.garden_auth import authenticated_sender, new_account
    from envelopay.mail.transport.garden import GardenTransport

    account, secret = new_account("enforcer", ["a1@garden.local"])  # a2 is not its agent
    sock = tmp_path / "lmtp.sock"
    garden = GardenServer(tmp_path / "garden", ["worker@garden.local"], unix_path=sock, fsync=False,
                          accounts=[account])
    deliverer = _transport(str(sock), None, 587, "starttls", None, {"ENVELOPAY_GARDEN_SECRET": secret})
    assert isinstance(deliverer, GardenTransport) and deliverer.auth == ("enforcer", secret)
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    try:
        async with garden:
            enforcer = Enforcer(store, deliverer, clock=clock)
            _, t1 = await enforcer.create_agent("a1", "a1@garden.local", allow=("garden.local",))
            _, t2 = await enforcer.create_agent("a2", "a2@garden.local", allow=("garden.local",))
            body = {"to": "worker@garden.local", "subject": "hello", "text": "hi"}
            assert (await enforcer.send(t1, {**body, "from": "a1@garden.local"})).status == "sent"
            refused = await enforcer.send(t2, {**body, "from": "a2@garden.local"})
            assert refused.status == "failed" and "553" in refused.reason
        [stored] = list((tmp_path / "garden" / "worker@garden.local" / "new").iterdir())
        assert authenticated_sender(stored.read_bytes(), authserv_id="garden.local") == "enforcer"
    finally:
        await store.close()
