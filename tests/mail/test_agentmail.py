"""The AgentMail transport against AgentMail's documented shapes (respx for its REST
API; fixtures/agentmail cite their pages and pass the official SDK's models), with a
real webhook endpoint on loopback and a real SQLite ledger for the event ids."""

from __future__ import annotations

import base64
import copy
import json
import sqlite3
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import httpx
import pydantic
import pytest
import respx
from agentmail.events.types.message_received_event import MessageReceivedEvent
from agentmail.messages.types.list_messages_response import ListMessagesResponse
from agentmail.messages.types.raw_message_response import RawMessageResponse
from agentmail.messages.types.send_message_response import SendMessageResponse
from agentmail.messages.types.update_message_response import UpdateMessageResponse
from agentmail.types.error_response import ErrorResponse

from envelopay import dkim
from envelopay.errors import TransportError
from envelopay.ledger.sqlite import SqliteStore
from envelopay.mail.agentmail.client import API_BASE, AgentMailClient, AgentMailConfig, AgentMailError
from envelopay.mail.agentmail.inbox import (
    LABEL_MALFORMED,
    LABEL_PROCESSED,
    AgentMailInbox,
    Disposition,
)
from envelopay.mail.agentmail.server import WebhookServer
from envelopay.mail.agentmail.transport import AgentMailTransport
from envelopay.mail.agentmail.webhook import read_event, sign_delivery, verify_delivery
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Methods, RailMethod, Which
from envelopay.protocol.outbound import Outbound

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "agentmail"
INBOX = "worker@agentmail.to"
BASE = f"{API_BASE}/v0/inboxes/{quote(INBOX, safe='')}"
SECRET = "whsec_" + base64.b64encode(b"envelopay-test-webhook-key-32byt").decode()
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
SDK_MODELS = {
    "send-response": SendMessageResponse,
    "reply-response": SendMessageResponse,
    "raw-response": RawMessageResponse,
    "list-messages": ListMessagesResponse,
    "update-response": UpdateMessageResponse,
    "error-404": ErrorResponse,
    "message-received": MessageReceivedEvent,
}


def fixture(name: str, **replace: str) -> dict[str, Any]:
    text = (FIXTURES / f"{name}.json").read_text()
    for key, value in replace.items():
        text = text.replace(key, value)
    data = json.loads(text)
    data.pop("_doc")
    return data  # type: ignore[no-any-return]


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class Consumer:
    """Stands in for the engine's inbound path: records the raw bytes it was handed."""

    def __init__(self, answers: list[Disposition] | None = None) -> None:
        self.got: list[bytes] = []
        self.answers = answers or []

    async def __call__(self, raw: bytes) -> Disposition:
        self.got.append(raw)
        return self.answers.pop(0) if self.answers else "processed"


def inbound_raw(mid: str = "<which.1@buyers.test>") -> bytes:
    out = Outbound("bob@buyers.test", INBOX, Which(id="w1", note="what do you take?"), mid, T0)
    return compose(out)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "ledger.db")
    yield s
    s.close()


@pytest.fixture
async def client() -> AsyncIterator[AgentMailClient]:
    c = AgentMailClient(AgentMailConfig(INBOX, "am_test_key"))
    yield c
    await c.aclose()


def mock_raw(router: respx.MockRouter, am_id: str, raw: bytes) -> tuple[respx.Route, respx.Route]:
    meta = fixture("raw-response", MESSAGE_ID=am_id, MESSAGE_KEY=am_id.strip("<>").replace("@", "_"))
    meta["size"] = len(raw)
    api = router.get(f"{BASE}/messages/{quote(am_id, safe='')}/raw").respond(json=meta)
    cdn = router.get(meta["download_url"]).respond(content=raw, headers={"content-type": "message/rfc822"})
    return api, cdn


# ------------------------------------------------------------------ shapes and signatures
@pytest.mark.parametrize("name", sorted(SDK_MODELS))
def test_fixtures_are_shapes_the_sdk_accepts(name: str) -> None:
    data = fixture(name)
    SDK_MODELS[name].model_validate(data)
    broken = copy.deepcopy(data)
    broken.pop(next(k for k in ("message_id", "messages", "name", "event_id") if k in broken))
    with pytest.raises(pydantic.ValidationError):
        SDK_MODELS[name].model_validate(broken)


def test_svix_signature_scheme_on_the_published_vector() -> None:
    # The vector AgentMail's verification page and Svix's manual-verification guide use.
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    headers = {"svix-id": "msg_p5jXN8AQM9LWM0D4loKWxJek", "svix-timestamp": "1614265330",
               "svix-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}
    body = b'{"test": 2432232314}'
    assert sign_delivery(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body) == headers
    assert verify_delivery(secret, headers, body, now=1614265330).ok
    # Rotated secrets: any one of several space-separated signatures may match.
    rotated = {**headers, "svix-signature": "v1,AAAA " + headers["svix-signature"]}
    assert verify_delivery(secret, rotated, body, now=1614265400).ok
    assert verify_delivery(secret, headers, body + b" ", now=1614265330).reason == "bad_signature"
    assert verify_delivery(secret, headers, body, now=1614265330 + 301).reason == "stale"
    assert verify_delivery(secret, headers, body, now=1614265330 - 301).reason == "stale"
    assert verify_delivery("not-a-secret", headers, body, now=1614265330).reason == "bad_secret"
    unsigned = {k: v for k, v in headers.items() if k != "svix-signature"}
    assert verify_delivery(secret, unsigned, body, now=1614265330).reason == "missing_headers"
    other = "whsec_" + base64.b64encode(b"another key").decode()
    assert verify_delivery(other, headers, body, now=1614265330).reason == "bad_signature"


def test_read_event() -> None:
    body = json.dumps(fixture("message-received", EVENT_ID="evt_1", MESSAGE_ID="<m@x>",
                              THREAD_ID="th_1")).encode()
    event = read_event(body)
    assert event is not None
    assert (event.event_type, event.event_id, event.message_id, event.thread_id, event.inbox_id) == (
        "message.received", "evt_1", "<m@x>", "th_1", INBOX)
    assert read_event(b"[]") is None and read_event(b"\xff") is None
    assert read_event(b'{"type": "event", "event_type": "message.sent"}') is None  # no event id


# ------------------------------------------------------------------------------- out
RAIL = RailMethod(chain="solana", token="USDC", wallet="W1", price=250000)


def reply_outbound() -> Outbound:
    return Outbound(INBOX, "bob@buyers.test", Methods(id="m1", note="we take USDC", rails=[RAIL]),
                    "<methods.1@agentmail.to>", T0, in_reply_to="<which.1@buyers.test>",
                    references=("<which.1@buyers.test>",))


async def test_send_hands_agentmail_our_subject_json_and_threading(
    client: AgentMailClient, store: SqliteStore
) -> None:
    out = reply_outbound()
    key = dkim.DkimKey.generate_ed25519()
    signed = dkim.sign(compose(out), selector="s", domain="agentmail.to", key=key)
    transport = AgentMailTransport(client, store, Clock())
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{BASE}/messages/send").respond(json=fixture("send-response"))
        await transport.send(signed, INBOX, "bob@buyers.test")
    request = route.calls.last.request
    assert request.headers["authorization"] == "Bearer am_test_key"
    assert request.headers["idempotency-key"] == out.message_id  # a resend is the same send
    body = json.loads(request.content)
    assert body["to"] == ["bob@buyers.test"]
    assert body["subject"] == "METHODS | we take USDC"
    sent_json = json.loads(body["text"])
    assert body["text"] == json.dumps(sent_json, separators=(",", ":")) + "\n"  # one line
    assert sent_json["type"] == "methods" and sent_json["id"] == "m1"
    [att] = body["attachments"]
    assert (att["filename"], att["content_type"]) == ("envelopay.json", "application/json")
    assert json.loads(base64.b64decode(att["content"])) == sent_json
    assert body["headers"] == {"In-Reply-To": "<which.1@buyers.test>", "References": "<which.1@buyers.test>"}
    assert "DKIM-Signature" not in json.dumps(body)  # AgentMail signs its own bytes
    SDK_ok = SendMessageResponse.model_validate(fixture("send-response"))
    assert store.event_data(f"agentmail-id:{INBOX}", out.message_id) == {
        "message_id": SDK_ok.message_id, "thread_id": SDK_ok.thread_id, "sent": True}


async def test_reply_endpoint_when_asked_and_the_message_is_known(
    client: AgentMailClient, store: SqliteStore
) -> None:
    out = reply_outbound()
    am_id = "<0100019a-inbound@email.agentmail.to>"
    ids = f"agentmail-id:{INBOX}"
    store.event_done(ids, "<which.1@buyers.test>", T0, {"message_id": am_id, "thread_id": "t"})
    transport = AgentMailTransport(client, store, Clock(), reply_via="endpoint")
    with respx.mock(assert_all_called=True) as router:
        route = router.post(f"{BASE}/messages/{quote(am_id, safe='')}/reply").respond(
            json=fixture("reply-response"))
        await transport.send(compose(out), INBOX, "bob@buyers.test")
    body = json.loads(route.calls.last.request.content)
    first, blank, line = body["text"].split("\n")[:3]
    assert (first, blank) == ("METHODS | we take USDC", "")  # the type survives "Re: <subject>"
    assert json.loads(line)["type"] == "methods" and "subject" not in body
    assert route.calls.last.request.headers["idempotency-key"] == out.message_id
    # Without a known AgentMail id for the message answered, it falls back to send.
    other = Outbound(INBOX, "bob@buyers.test", Which(id="w2"), "<w2@agentmail.to>", T0,
                     in_reply_to="<unknown@buyers.test>")
    with respx.mock(assert_all_called=True) as router:
        router.post(f"{BASE}/messages/send").respond(json=fixture("send-response"))
        await transport.send(compose(other), INBOX, "bob@buyers.test")


async def test_api_errors_are_transport_errors_with_the_right_permanence(client: AgentMailClient) -> None:
    transport_args = dict(to=["b@x.test"], subject="WHICH", text="{}")
    with respx.mock() as router:
        route = router.post(f"{BASE}/messages/send")
        route.respond(404, json=fixture("error-404"))
        with pytest.raises(AgentMailError) as refused:
            await client.send(**transport_args)  # type: ignore[arg-type]
        assert refused.value.permanent and refused.value.status == 404 and refused.value.code == "not_found"
        assert "Message not found" in str(refused.value)
        route.respond(429, json={"name": "RateLimitError", "message": "slow down"})
        with pytest.raises(AgentMailError) as limited:
            await client.send(**transport_args)  # type: ignore[arg-type]
        assert not limited.value.permanent
        route.side_effect = httpx.ConnectError("unreachable")
        with pytest.raises(TransportError) as broken:
            await client.send(**transport_args)  # type: ignore[arg-type]
        assert not getattr(broken.value, "permanent", False)


async def test_send_refuses_another_sender(client: AgentMailClient, store: SqliteStore) -> None:
    out = reply_outbound()
    with pytest.raises(AgentMailError) as exc:
        await AgentMailTransport(client, store, Clock()).send(compose(out), "else@agentmail.to", "b@x.test")
    assert exc.value.permanent


# -------------------------------------------------------------------------------- in
async def test_raw_fetch_follows_the_download_url_without_our_key(client: AgentMailClient) -> None:
    raw = inbound_raw()
    with respx.mock(assert_all_called=True) as router:
        api, cdn = mock_raw(router, "<am.1@agentmail.to>", raw)
        assert await client.raw("<am.1@agentmail.to>") == raw
    assert api.calls.last.request.headers["authorization"] == "Bearer am_test_key"
    assert "authorization" not in cdn.calls.last.request.headers  # never sent to the CDN
    with respx.mock() as router:  # the size the API states must be the size we got
        meta = fixture("raw-response", MESSAGE_ID="x", MESSAGE_KEY="x")
        meta["size"] = len(raw) + 1
        router.get(f"{BASE}/messages/x/raw").respond(json=meta)
        router.get(meta["download_url"]).respond(content=raw)
        with pytest.raises(AgentMailError, match="bytes"):
            await client.raw("x")
    with respx.mock() as router:  # the older revision answered the file itself
        router.get(f"{BASE}/messages/y/raw").respond(content=raw, headers={"content-type": "message/rfc822"})
        assert await client.raw("y") == raw


async def post(server: WebhookServer, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(server.url, data=body, headers=headers) as resp:
        return resp.status, await resp.json()


def delivery(event_id: str, am_id: str, at: datetime) -> tuple[bytes, dict[str, str]]:
    event = fixture("message-received", EVENT_ID=event_id, MESSAGE_ID=am_id, THREAD_ID="th_1")
    body = json.dumps(event).encode()
    return body, sign_delivery(SECRET, f"msg_{event_id}", int(at.timestamp()), body)


async def test_webhook_good_bad_and_replayed_signatures(
    client: AgentMailClient, store: SqliteStore, tmp_path: Path
) -> None:
    clock, consumer = Clock(), Consumer()
    inbox = AgentMailInbox(client, store, consumer, clock, secret=SECRET)
    server = WebhookServer(inbox)
    await server.start()
    am_id, raw = "<am.1@agentmail.to>", inbound_raw()
    body, headers = delivery("evt_1", am_id, clock.now)
    try:
        with respx.mock(assert_all_called=False) as router:
            api, cdn = mock_raw(router, am_id, raw)
            label = router.patch(f"{BASE}/messages/{quote(am_id, safe='')}").respond(
                json=fixture("update-response", MESSAGE_ID=am_id))
            # Bad: a body changed after signing, and no signature at all.
            tampered = body.replace(b"worker@agentmail.to", b"other@agentmail.to", 1)
            assert (await post(server, tampered, headers))[0] == 401
            unsigned = {k: v for k, v in headers.items() if k != "svix-signature"}
            refused = {"status": "refused", "reason": "missing_headers"}
            assert await post(server, body, unsigned) == (401, refused)
            assert consumer.got == [] and not api.called
            # Good: fetched raw, handed over as the exact bytes, labelled, recorded.
            assert await post(server, body, headers) == (200, {"status": "processed", "event_id": "evt_1"})
            assert consumer.got == [raw] and cdn.call_count == 1
            assert json.loads(label.calls.last.request.content) == {"add_labels": [LABEL_PROCESSED]}
            # Replayed inside the window (or redelivered by AgentMail): a duplicate, nothing more.
            assert await post(server, body, headers) == (200, {"status": "duplicate", "event_id": "evt_1"})
            # Replayed after the window: refused before anything is read.
            clock.now = T0 + timedelta(minutes=6)
            assert await post(server, body, headers) == (401, {"status": "refused", "reason": "stale"})
            # A new event for a message already handled (AgentMail sent it twice): no second step.
            body2, headers2 = delivery("evt_2", am_id, clock.now)
            assert (await post(server, body2, headers2))[0] == 200
            assert consumer.got == [raw] and cdn.call_count == 1
    finally:
        await server.stop()
    # The event ids are in the ledger, not in memory: a restarted worker knows them.
    store.close()
    reopened = SqliteStore(tmp_path / "ledger.db")
    again = AgentMailInbox(client, reopened, Consumer(), Clock(T0), secret=SECRET)
    answer = await again.on_webhook(headers, body)
    assert (answer.status, answer.body["status"]) == (200, "duplicate")
    reopened.close()


def _hostile_bodies() -> dict[str, bytes]:
    """Signed bodies whose content is outside input no ledger row or URL can hold (issue 29)."""
    good = json.dumps(fixture("message-received", EVENT_ID="evt_h", MESSAGE_ID="<h@x>", THREAD_ID="th_1"))
    return {
        "surrogate event_id": good.replace('"evt_h"', '"\\ud800"').encode(),
        "surrogate message_id": good.replace('"<h@x>"', '"<\\udcff@x>"').encode(),
        "surrogate event_type": good.replace('"message.received"', '"message.\\ud800"').encode(),
        "NUL event_id": good.replace('"evt_h"', '"evt\\u0000"').encode(),
        "200,000 deep": good.replace('"th_1"', "[" * 200_000 + "]" * 200_000).encode(),
        "5,000 digits": good.replace('"th_1"', "9" * 5_000).encode(),
    }


@pytest.mark.parametrize("case", sorted(_hostile_bodies()))
async def test_a_signed_body_no_ledger_can_hold_is_refused_400(
    client: AgentMailClient, store: SqliteStore, case: str, tmp_path: Path
) -> None:
    body = _hostile_bodies()[case]
    consumer = Consumer()
    inbox = AgentMailInbox(client, store, consumer, Clock(), secret=SECRET)
    server = WebhookServer(inbox)
    await server.start()
    try:
        with respx.mock(assert_all_called=False) as router:
            api = router.route(host="api.agentmail.to").respond(status_code=599)
            headers = sign_delivery(SECRET, "msg_h", int(T0.timestamp()), body)
            assert await post(server, body, headers) == (400, {"status": "refused",
                                                               "reason": "not an AgentMail event"})
            assert not api.called and consumer.got == []
    finally:
        await server.stop()
    with sqlite3.connect(tmp_path / "ledger.db") as db:  # nothing recorded, nothing half-recorded
        assert db.execute("SELECT COUNT(*) FROM ep_events").fetchone() == (0,)


async def test_a_delivery_id_no_wire_could_carry_is_a_bad_signature(
    client: AgentMailClient, store: SqliteStore
) -> None:
    body, headers = delivery("evt_s", "<s@x>", T0)
    inbox = AgentMailInbox(client, store, Consumer(), Clock(), secret=SECRET)
    answer = await inbox.on_webhook({**headers, "svix-id": "msg_\ud800"}, body)
    assert (answer.status, dict(answer.body)) == (401, {"status": "refused", "reason": "bad_signature"})
    # Bytes aiohttp could not decode arrive surrogate-escaped: they are checked as those bytes.
    escaped = "msg_\udcff"
    signed = sign_delivery(SECRET, "x", int(T0.timestamp()), body)["svix-signature"]
    assert verify_delivery(SECRET, {**headers, "svix-id": escaped, "svix-signature": signed}, body,
                           now=T0.timestamp()).reason == "bad_signature"


async def test_webhook_malformed_and_retry(client: AgentMailClient, store: SqliteStore) -> None:
    consumer = Consumer(["retry", "processed", "malformed"])
    inbox = AgentMailInbox(client, store, consumer, Clock(), secret=SECRET)
    with respx.mock() as router:
        mock_raw(router, "<a@x>", inbound_raw("<a.1@buyers.test>"))
        mock_raw(router, "<b@x>", b"Subject: hello\r\n\r\nnot protocol\r\n")
        labels = router.patch(url__regex=rf"{BASE}/messages/.*").respond(
            json=fixture("update-response", MESSAGE_ID="x"))
        body, headers = delivery("evt_a", "<a@x>", T0)
        first = await inbox.on_webhook(headers, body)
        assert (first.status, first.body["status"]) == (503, "retry")  # AgentMail delivers it again
        assert not store.event_seen(f"agentmail-event:{INBOX}", "evt_a") and not labels.called
        second = await inbox.on_webhook(headers, body)
        assert (second.status, second.body["status"]) == (200, "processed")
        body, headers = delivery("evt_b", "<b@x>", T0)
        assert (await inbox.on_webhook(headers, body)).body["status"] == "malformed"
        assert json.loads(labels.calls.last.request.content) == {"add_labels": [LABEL_MALFORMED]}
    # Each message's RFC Message-ID now maps to AgentMail's id (for the reply endpoint).
    assert store.event_data(f"agentmail-id:{INBOX}", "<a.1@buyers.test>") == {"message_id": "<a@x>",
                                                                             "thread_id": "th_1"}


async def test_webhook_without_a_secret_refuses_everything(
    client: AgentMailClient, store: SqliteStore
) -> None:
    body, headers = delivery("evt_1", "<a@x>", T0)
    answer = await AgentMailInbox(client, store, Consumer(), Clock()).on_webhook(headers, body)
    assert answer.status == 503 and answer.body["status"] == "refused"


async def test_polling_fallback_handles_unlabelled_received_mail_once(
    client: AgentMailClient, store: SqliteStore
) -> None:
    consumer = Consumer()
    inbox = AgentMailInbox(client, store, consumer, Clock())
    am_id, raw = "<am.2@agentmail.to>", inbound_raw("<order.2@buyers.test>")
    with respx.mock() as router:
        listing = router.get(f"{BASE}/messages").respond(json=fixture("list-messages", MESSAGE_ID=am_id))
        mock_raw(router, am_id, raw)
        router.patch(f"{BASE}/messages/{quote(am_id, safe='')}").respond(
            json=fixture("update-response", MESSAGE_ID=am_id))
        assert await inbox.poll_once() == 1  # the first item already carries envelopay-processed
        assert consumer.got == [raw]
        assert await inbox.poll_once() == 0  # recorded in the ledger: not fetched again
        assert consumer.got == [raw]
    query = listing.calls.last.request.url.params
    assert query.get_list("labels") == ["received"] and query["ascending"] == "true"
    assert datetime.fromisoformat(query["after"]) == T0 - timedelta(days=7)
