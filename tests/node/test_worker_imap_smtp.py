"""The worker on real mail accounts: IMAP IDLE in (Dovecot), SMTP submission out (aiosmtpd)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP

from envelopay import dkim
from envelopay.config import config_from_dict
from envelopay.node.serve import serve_worker
from envelopay.protocol.compose import compose_message
from envelopay.protocol.messages import Order, Which
from envelopay.protocol.parse import parse
from envelopay.testing.dovecot import running_dovecot

WALLET = "4vJ9JU1bJJE96FWSJKvHsmmFADCg4gpZQff4P3bkLKi"  # [[accept]] is judged by the rail: a Solana key


class Sink:
    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.arrived = asyncio.Event()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope.original_content or envelope.content)
        self.arrived.set()
        return "250 OK"


async def test_worker_answers_over_imap_and_smtp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    buyer_key, worker_key = dkim.DkimKey.generate_ed25519(), dkim.DkimKey.generate_ed25519()
    (tmp_path / "worker.pem").write_bytes(worker_key.private_pem())
    sink = Sink()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(sink, decode_data=False), "127.0.0.1", 0)
    smtp_port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("EP_IMAP_PASSWORD", "secret")
    with running_dovecot() as dove:
        cfg = config_from_dict({
            "agent": {"address": "worker@agents.test", "domain": "agents.test", "ledger": "w.db",
                      "dkim_selector": "w", "dkim_key": "worker.pem", "dkim_policy": "required"},
            "transport": {"kind": "smtp", "smtp_host": "127.0.0.1", "smtp_port": smtp_port,
                          "smtp_security": "none", "imap_host": "127.0.0.1", "imap_port": dove.imap_port,
                          "imap_tls": False, "imap_user": "alice", "imap_password_env": "EP_IMAP_PASSWORD"},
            "rails": {"solana": {"backend": "local"}},
            "accept": [{"chain": "solana-local", "token": "USDC", "wallet": WALLET}],
            "tasks": [{"name": "digest", "handler": "envelopay.worker.operations:digest",
                       "schema": "envelopay.worker.operations:Digest", "price": "0"}],
            "dkim_records": {"b._domainkey.buyers.test": buyer_key.dns_txt_record()},
        }, base_dir=tmp_path)
        stop = asyncio.Event()
        serving = asyncio.create_task(serve_worker(cfg, echo=lambda _: None, stop=stop))
        now = datetime.now(UTC)
        raw1, mid1 = compose_message(Which(id="w1"), sender="bob@buyers.test", recipient="worker@agents.test",
                                     domain="buyers.test", now=now)
        raw2, mid2 = compose_message(Order(id="o1", task={"name": "digest", "text": "abc"}),
                                     sender="bob@buyers.test", recipient="worker@agents.test",
                                     domain="buyers.test", now=now)
        try:
            for raw in (raw1, raw2):
                signed = dkim.sign(raw, selector="b", domain="buyers.test", key=buyer_key)
                await asyncio.to_thread(dove.deliver, "alice", signed)
            async with asyncio.timeout(60):
                while len(sink.messages) < 2:
                    sink.arrived.clear()
                    await sink.arrived.wait()
        finally:
            stop.set()
            await serving
            server.close()
            await server.wait_closed()
    replies = {parse(m).in_reply_to: parse(m) for m in sink.messages}
    methods, fulfil = replies[mid1], replies[mid2]
    assert methods.type is not None and methods.type.value == "methods" and methods.valid
    assert fulfil.type is not None and fulfil.type.value == "fulfill"
    assert fulfil.body is not None and fulfil.body["result"]["sha256"].startswith("ba7816bf")
    # Signed by the worker with its own key: verifies against its record.
    dns = dkim.table_dns({"w._domainkey.agents.test": worker_key.dns_txt_record()})
    verdict = await dkim.verify(sink.messages[0], dns=dns)
    assert verdict.status == "pass"
