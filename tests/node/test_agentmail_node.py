"""A worker on an AgentMail inbox plays first contact with a buyer in the garden.

The bridge plays AgentMail, from its documented shapes (fixtures/agentmail): a
buyer's mail to the inbox is stored as a raw message and announced by a signed webhook
delivery to the worker's real loopback endpoint; the worker's API sends (respx) become
mail for the buyer, composed and DKIM-signed as AgentMail would (its key, its
Message-ID, our Subject, text, attachment and threading headers). Everything else is
real: both ledgers, DKIM both ways, the worker's `worker serve` loop from README's
"Run on AgentMail" block, the buyer's engine and flow.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import tomllib
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import httpx
import pytest
import respx

from envelopay import dkim
from envelopay.client.demo import BuyerApp
from envelopay.config import config_from_dict
from envelopay.mail.agentmail.client import API_BASE
from envelopay.mail.agentmail.inbox import LABEL_PROCESSED
from envelopay.mail.agentmail.webhook import sign_delivery
from envelopay.node.agent_node import build_node
from envelopay.node.serve import serve_worker
from envelopay.protocol.messages import Fulfill, Methods, Order, Which
from envelopay.protocol.parse import parse

ROOT = Path(__file__).resolve().parents[2]
INBOX = "worker@agentmail.to"
BUYER = "buyer@garden.local"
BASE = f"{API_BASE}/v0/inboxes/{quote(INBOX, safe='')}"
CDN = "https://d1raw.cloudfront.net/raw/"
SECRET = "whsec_" + base64.b64encode(b"envelopay-bridge-webhook-key-32b").decode()
WALLET = "4vJ9JU1bJJE96FWSJKvHsmmFADCg4gpZQff4P3bkLKi"  # [[accept]] is judged by the rail: a Solana key


def readme_block(name: str) -> str:
    after = (ROOT / "README.md").read_text().split(f"<!-- readme:{name} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def fixture(name: str) -> dict[str, Any]:
    data = json.loads((ROOT / "fixtures" / "agentmail" / f"{name}.json").read_text())
    data.pop("_doc")
    return data  # type: ignore[no-any-return]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Bridge:
    """AgentMail between the garden and the worker's inbox (see the module docstring)."""

    def __init__(self, webhook_url: str, key: dkim.DkimKey) -> None:
        self.webhook_url = webhook_url
        self.key = key
        self.raw: dict[str, bytes] = {}
        self.sent: list[dict[str, Any]] = []
        self.labels: list[tuple[str, dict[str, Any]]] = []
        self.n = 0

    def install(self, router: respx.MockRouter) -> None:
        router.get(url__regex=rf"^{BASE}/messages/(?P<mid>[^/]+)/raw$").mock(side_effect=self._raw_meta)
        router.get(url__startswith=CDN).mock(side_effect=self._raw_file)
        router.post(f"{BASE}/messages/send").mock(side_effect=self._send)
        router.patch(url__regex=rf"^{BASE}/messages/(?P<mid>[^/]+)$").mock(side_effect=self._label)

    def _raw_meta(self, request: httpx.Request, mid: str) -> httpx.Response:
        am_id = unquote(mid)
        meta = fixture("raw-response") | {"message_id": am_id, "size": len(self.raw[am_id]),
                                          "download_url": CDN + quote(am_id, safe="")}
        return httpx.Response(200, json=meta)

    def _raw_file(self, request: httpx.Request) -> httpx.Response:
        assert "authorization" not in request.headers
        return httpx.Response(200, content=self.raw[unquote(request.url.path.rsplit("/", 1)[1])])

    def _send(self, request: httpx.Request) -> httpx.Response:
        self.n += 1
        self.sent.append({"body": json.loads(request.content), "message_id": f"<out.{self.n}@agentmail.to>",
                          "idempotency": request.headers.get("idempotency-key")})
        return httpx.Response(200, json={"message_id": self.sent[-1]["message_id"], "thread_id": "th_1"})

    def _label(self, request: httpx.Request, mid: str) -> httpx.Response:
        self.labels.append((unquote(mid), json.loads(request.content)))
        return httpx.Response(200, json={"message_id": unquote(mid), "labels": ["received", LABEL_PROCESSED]})

    async def to_inbox(self, raw: bytes) -> dict[str, Any]:
        """A buyer's message arrives at the inbox: stored, then announced by webhook."""
        self.n += 1
        am_id = f"<in.{self.n}@agentmail.to>"
        self.raw[am_id] = raw
        event = fixture("message-received")
        event["event_id"] = f"evt_{self.n}"
        event["message"] |= {"message_id": am_id, "thread_id": "th_1"}
        body = json.dumps(event).encode()
        headers = sign_delivery(SECRET, f"msg_{self.n}", int(datetime.now(UTC).timestamp()), body)
        url = self.webhook_url
        async with aiohttp.ClientSession() as http, http.post(url, data=body, headers=headers) as r:
            assert r.status == 200, await r.text()
            return await r.json()  # type: ignore[no-any-return]

    def delivered(self, sent: dict[str, Any]) -> bytes:
        """What the buyer's MX receives for one API send, as AgentMail composes it."""
        body = sent["body"]
        msg = EmailMessage()
        msg["From"] = INBOX
        msg["To"] = ", ".join(body["to"])
        msg["Subject"] = body["subject"]
        msg["Date"] = format_datetime(datetime.now(UTC))
        msg["Message-ID"] = sent["message_id"]
        for name, value in body.get("headers", {}).items():
            msg[name] = value
        msg.set_content(body["text"])
        for att in body.get("attachments", []):
            maintype, subtype = att["content_type"].split("/")
            msg.add_attachment(base64.b64decode(att["content"]), maintype=maintype, subtype=subtype,
                               filename=att["filename"])
        raw = msg.as_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        return dkim.sign(raw, selector="am", domain="agentmail.to", key=self.key)


class BridgeTransport:
    """The buyer's outgoing mail: to the AgentMail inbox, through the bridge."""

    def __init__(self, bridge: Bridge) -> None:
        self.bridge = bridge
        self.answers: list[dict[str, Any]] = []

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        assert recipient == INBOX
        self.answers.append(await self.bridge.to_inbox(raw))

    async def close(self) -> None:
        return None


async def test_worker_on_agentmail_plays_first_contact_with_a_garden_buyer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buyer_key, am_key = dkim.DkimKey.generate_ed25519(), dkim.DkimKey.generate_ed25519()
    (tmp_path / "buyer.pem").write_bytes(buyer_key.private_pem())
    monkeypatch.setenv("AGENTMAIL_API_KEY", "am_test_key")
    monkeypatch.setenv("AGENTMAIL_WEBHOOK_SECRET", SECRET)
    # README's "Run on AgentMail" block as written; only the port and the DNS are the test's.
    conf = tomllib.loads(readme_block("agentmail-config"))
    assert conf["transport"]["kind"] == "agentmail" and conf["agent"]["address"] == INBOX
    port = free_port()
    conf["transport"]["agentmail_webhook_port"] = port
    conf["transport"]["agentmail_poll_interval"] = 0
    conf["agent"] |= {"dkim_dns": "table", "dkim_policy": "required"}
    conf |= {
        "rails": {"solana": {"backend": "local"}},
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": WALLET}],
        "tasks": [{"name": "digest", "handler": "envelopay.worker.operations:digest",
                   "schema": "envelopay.worker.operations:Digest", "price": "0"}],
        "dkim_records": {"b._domainkey.garden.local": buyer_key.dns_txt_record()},
    }
    worker_cfg = config_from_dict(conf, base_dir=tmp_path / "worker")
    buyer_cfg = config_from_dict({
        "agent": {"address": BUYER, "domain": "garden.local", "ledger": "buyer.db", "dkim_selector": "b",
                  "dkim_key": str(tmp_path / "buyer.pem"), "dkim_policy": "required", "dkim_dns": "table"},
        "rails": {"solana": {"backend": "local"}},
        "dkim_records": {"am._domainkey.agentmail.to": am_key.dns_txt_record()},
    }, base_dir=tmp_path / "buyer")
    bridge = Bridge(f"http://127.0.0.1:{port}/webhooks/agentmail", am_key)
    stop = asyncio.Event()
    lines: list[str] = []
    with respx.mock(assert_all_mocked=True, assert_all_called=False) as router:
        bridge.install(router)
        serving = asyncio.create_task(serve_worker(worker_cfg, echo=lines.append, stop=stop))
        transport = BridgeTransport(bridge)
        buyer = build_node(buyer_cfg, app=BuyerApp({}), transport=transport)
        try:
            async with asyncio.timeout(30):
                while not any("webhook" in line for line in lines):  # the listener is up
                    await asyncio.sleep(0.01)
            which = await buyer.send(Which(id="w1"), INBOX)
            assert transport.answers[-1]["status"] == "processed"
            [methods_sent] = bridge.sent
            assert methods_sent["body"]["subject"].startswith("METHODS")
            assert methods_sent["body"]["headers"]["In-Reply-To"] == which.message_id
            got = await buyer.receive(bridge.delivered(methods_sent))
            assert (got.status, got.flow_id) == ("processed", which.flow_id)
            methods = parse(bridge.delivered(methods_sent)).message
            assert isinstance(methods, Methods) and methods.which_ref == "w1"
            order = await buyer.send(Order(id="o1", task={"name": "digest", "text": "abc"}), INBOX)
            assert transport.answers[-1]["status"] == "processed"
            # The ORDER is a job: its FULFILL leaves when the runner has done it (a WAIT may
            # come first, the buyer speaking the status extension).
            while not any(s["body"]["subject"].startswith("FULFILL") for s in bridge.sent):
                await asyncio.sleep(0.01)
            [fulfil_sent] = [s for s in bridge.sent if s["body"]["subject"].startswith("FULFILL")]
            assert fulfil_sent["body"]["headers"]["In-Reply-To"] == order.message_id
            # Our outbox row's Message-ID is AgentMail's Idempotency-Key (a resend is one send).
            assert fulfil_sent["idempotency"].endswith("@agentmail.to>")
            done = await buyer.receive(bridge.delivered(fulfil_sent))
            assert done.status == "processed" and done.state is not None
            fulfil = parse(bridge.delivered(fulfil_sent)).message
            assert isinstance(fulfil, Fulfill) and fulfil.order_ref == "o1"
            assert fulfil.result["sha256"].startswith("ba7816bf")
            flow = buyer.store.get_flow(order.flow_id)
            assert flow is not None and flow.state == done.state
        finally:
            stop.set()
            await serving
            await buyer.close()
            buyer.store.close()
    # Each inbound message was labelled processed once.
    assert [(mid, body["add_labels"]) for mid, body in bridge.labels] == [
        ("<in.1@agentmail.to>", [LABEL_PROCESSED]), ("<in.3@agentmail.to>", [LABEL_PROCESSED])]
