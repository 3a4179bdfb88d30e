"""Responders and client calls, wired to each other through raw mail bytes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.endpoints.calls import CallClient, CallStore
from envelopay.endpoints.reference import reference_responder
from envelopay.endpoints.toolmail import build_tool_mail, read_tool_mail
from envelopay.errors import UsageError

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
KV = reference_responder("garden.local")


def _request(payload: dict[str, object] | None, *, raw_json: bytes | None = None) -> bytes:
    if raw_json is not None:
        return (
            b"From: a@garden.local\r\nTo: kv@garden.local\r\nSubject: CALL kv\r\n"
            b"Message-ID: <q1@garden.local>\r\nContent-Type: application/json\r\n\r\n" + raw_json
        )
    return build_tool_mail(
        sender="a@garden.local", recipient="kv@garden.local", subject="CALL kv",
        payload=payload or {}, human="hi", message_id="<q1@garden.local>", now=NOW, call_id="call_1",
    )


def test_reference_responder_ok_and_threaded() -> None:
    reply = KV.respond(_request({"key": "spec.version"}), now=NOW, domain="garden.local")
    assert reply is not None
    mail = read_tool_mail(reply)
    assert mail.in_reply_to == "<q1@garden.local>"
    assert mail.call_id == "call_1"
    assert mail.recipient == "a@garden.local"
    assert mail.payload == {"status": "ok", "endpoint": "kv@garden.local",
                            "result": {"key": "spec.version", "value": "0.1.0"}}
    # Deterministic: the same request gets byte-identical reply.
    assert KV.respond(_request({"key": "spec.version"}), now=NOW, domain="garden.local") == reply


@pytest.mark.parametrize(
    ("payload", "raw_json", "code", "field"),
    [
        ({"key": "nope"}, None, "not_found", "key"),
        ({"key": "UPPER"}, None, "invalid_field", "key"),
        ({"key": "spec.version", "exec": "rm -rf /"}, None, "invalid_field", "exec"),
        ({}, None, "invalid_field", "key"),
        (None, b"{not json", "invalid_json", None),
        (None, b"[1, 2]", "not_an_object", None),
    ],
)
def test_responder_errors_are_structured(
    payload: dict[str, object] | None, raw_json: bytes | None, code: str, field: str | None
) -> None:
    reply = KV.respond(_request(payload, raw_json=raw_json), now=NOW, domain="garden.local")
    assert reply is not None
    body = read_tool_mail(reply).payload
    assert body is not None
    assert body["status"] == "error"
    assert body["error"]["code"] == code
    assert body["error"].get("field") == field


def test_forwarded_message_is_not_a_request() -> None:
    inner = _request({"key": "spec.version"})
    outer = (
        b"From: a@garden.local\r\nTo: kv@garden.local\r\nSubject: Fwd\r\nMessage-ID: <f@x>\r\n"
        b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=BB\r\n\r\n--BB\r\n"
        b"Content-Type: text/plain\r\n\r\nsee attached\r\n--BB\r\nContent-Type: message/rfc822\r\n\r\n"
        + inner + b"\r\n--BB--\r\n"
    )
    reply = KV.respond(outer, now=NOW, domain="garden.local")
    assert reply is not None
    body = read_tool_mail(reply).payload
    assert body is not None and body["error"]["code"] == "missing_payload"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


async def test_call_round_trip_and_restart(tmp_path: Path) -> None:
    db = tmp_path / "calls.db"
    outbox: list[bytes] = []

    async def send(raw: bytes, sender: str, to: str) -> None:
        outbox.append(raw)

    clock = Clock()
    client = CallClient(CallStore(db), address="a@garden.local", domain="garden.local",
                         send=send, clock=clock)
    call_id, mid = await client.send("kv@garden.local", {"key": "usdc.decimals"}, timeout=30)
    assert read_tool_mail(outbox[0]).message_id == mid
    client.store.close()

    # A new process: the outstanding call survived; the reply is matched by In-Reply-To.
    client2 = CallClient(CallStore(db), address="a@garden.local", domain="garden.local",
                         send=send, clock=clock)
    assert [r.call_id for r in client2.store.pending()] == [call_id]
    reply = KV.respond(outbox[0], now=NOW, domain="garden.local")
    assert reply is not None
    res = client2.on_reply(reply)
    assert res is not None and res.ok and res.result == {"key": "usdc.decimals", "value": "6"}
    assert client2.on_reply(reply) is None  # a duplicate settles nothing
    assert (await client2.wait(call_id)).result == {"key": "usdc.decimals", "value": "6"}


async def test_call_matches_only_its_endpoint_and_times_out(tmp_path: Path) -> None:
    sent: list[bytes] = []

    async def send(raw: bytes, sender: str, to: str) -> None:
        sent.append(raw)

    clock = Clock()
    client = CallClient(CallStore(tmp_path / "c.db"), address="a@garden.local", domain="garden.local",
                        send=send, clock=clock, poll_interval=0.01)
    call_id, mid = await client.send("kv@garden.local", {"key": "spec.version"}, timeout=5)
    forged = build_tool_mail(sender="evil@garden.local", recipient="a@garden.local", subject="Re",
                             payload={"status": "ok", "result": "pwned"}, human="x",
                             message_id="<e@x>", now=NOW, in_reply_to=mid)
    assert client.on_reply(forged) is None
    waiter = asyncio.create_task(client.wait(call_id))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    clock.now = NOW + timedelta(seconds=6)
    res = await asyncio.wait_for(waiter, 10)
    assert res.status == "timeout" and res.error is not None and res.error["code"] == "timeout"
    # A reply after the deadline changes nothing.
    late = KV.respond(sent[0], now=NOW, domain="garden.local")
    assert late is not None and client.on_reply(late) is None


async def test_call_wakes_on_reply_and_refuses_bad_requests(tmp_path: Path) -> None:
    client: CallClient

    async def send(raw: bytes, sender: str, to: str) -> None:
        reply = KV.respond(raw, now=NOW, domain="garden.local")
        assert reply is not None
        asyncio.get_running_loop().call_soon(client.on_reply, reply)

    client = CallClient(CallStore(tmp_path / "c.db"), address="a@garden.local", domain="garden.local",
                        send=send, poll_interval=5)
    res = await asyncio.wait_for(client.call("kv@garden.local", {"key": "nope"}, timeout=30), 3)
    assert res.status == "error" and res.error is not None and res.error["code"] == "not_found"
    with pytest.raises(UsageError):
        await client.send("kv@garden.local", {"x": float("nan")})
    with pytest.raises(UsageError):
        await client.send("kv@garden.local", {"x": 1}, timeout=0)
