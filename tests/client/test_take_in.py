"""`accept` first takes in the mail already waiting in its Maildir (issue 15: an OFFER that
arrived since the last command can be accepted at once); `take_in` is that step."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from envelopay.client.buyer import ClientApp
from envelopay.client.commands import take_in
from envelopay.config import load_config
from envelopay.mail.maildir import deliver_file
from envelopay.node.agent_node import build_node
from envelopay.node.init import init_agent
from envelopay.protocol import compose_message
from envelopay.protocol.messages import Invoice

CLIENT, WORKER = "client@garden.local", "worker@garden.local"


async def test_waiting_mail_is_handled_oldest_first_and_filed(tmp_path: Path) -> None:
    init_agent(tmp_path, address=CLIENT)
    cfg = tmp_path / "envelopay.toml"  # a garden to send through; nothing is sent here
    cfg.write_text(cfg.read_text().replace('garden_root = "var/garden"',
                                           'garden_root = "var/garden"\nlmtp_port = 9'))
    node = build_node(load_config(tmp_path / "envelopay.toml"), app=ClientApp({}))
    try:
        assert node.maildir is not None
        assert await take_in(node) == 0  # nothing waiting: nothing to do
        for n in (1, 2):
            bill = Invoice(id=f"inv_{n}", amount=1000, token="USDC", chain="solana-local", wallet="W")
            raw, _ = compose_message(bill, sender=WORKER, recipient=CLIENT, domain="garden.local",
                                     now=datetime.now(UTC))
            deliver_file(node.maildir, raw)
        assert await take_in(node) == 2
        for n in (1, 2):
            rec = node.store.flow_for_ref(CLIENT, WORKER, WORKER, f"inv_{n}")
            assert rec is not None and rec.state == "invoiced" and rec.side == "payer"
        assert list((node.maildir / "new").iterdir()) == []
        assert len(list((node.maildir / "cur").iterdir())) == 2
    finally:
        await node.close()
        node.store.close()
