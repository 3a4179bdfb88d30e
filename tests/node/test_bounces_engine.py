"""The engine's DSN step on the worker's own inbound path (no MTA needed): a bounce
naming one of its outbox rows marks that row; any other report changes nothing; none
is answered. The real Postfix path is tests/mail/test_postfix.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay.config import config_from_dict
from envelopay.ledger.store import Commit
from envelopay.node.agent_node import build_node
from envelopay.node.agentmail import disposition
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Fulfill
from envelopay.protocol.outbound import Outbound

DSN = (Path(__file__).resolve().parents[2] / "fixtures" / "dsn" / "postfix-550-5.1.1.eml").read_bytes()
WALLET = "4vJ9JU1bJJE96FWSJKvHsmmFADCg4gpZQff4P3bkLKi"  # [[accept]] is judged by the rail: a Solana key
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


async def test_a_dsn_marks_its_row_and_is_never_answered(tmp_path: Path) -> None:
    cfg = config_from_dict({
        "agent": {"address": "worker@worker.test", "domain": "worker.test", "ledger": "w.db",
                  "dkim_policy": "off"},
        "rails": {"solana": {"backend": "local"}},
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": WALLET}],
        "transport": {"kind": "garden", "lmtp_port": 9},  # never used: nothing is answered
    }, base_dir=tmp_path)
    node = build_node(cfg)
    try:
        row = Outbound("worker@worker.test", "buyer@far.test",
                       Fulfill(id="f1", order_ref="o1", result={}), "<out.1@worker.test>", T0)
        commit = Commit(row.sender, T0, {"status": "sent"}, outbox=((row, "f"),))
        assert node.store.commit_step(commit) == "ok"
        assert node.store.mark_sent(row.message_id, T0)
        out = await node.receive(DSN)
        assert (out.status, out.outbox) == ("ignored", ())
        assert out.verdict is not None
        assert (out.verdict["bounce"], out.verdict["status"]) == ("bounced", "5.1.1")
        got = node.store.outbox_get(row.message_id)
        assert got is not None and (got.status, got.bounce_status) == ("bounced", "5.1.1")
        again = await node.receive(DSN)
        assert again.verdict is not None and again.verdict["bounce"] == "already"
        # A report about a message this worker never sent: nothing changes.
        other = await node.receive(DSN.replace(b"<out.1@worker.test>", b"<never@worker.test>"))
        assert other.status == "ignored" and other.verdict is not None
        assert other.verdict["bounce"] == "unknown_message"
        assert node.store.outbox_pending(T0.replace(year=2027)) == []
    finally:
        await node.close()
        node.store.close()


@pytest.mark.parametrize(
    ("status", "oops", "label"),
    [
        ("processed", None, "processed"),
        ("refused", OopsCode.PROOF_REPLAYED, "processed"),  # well-formed, refused: handled
        ("refused", OopsCode.INVALID_JSON, "malformed"),
        ("refused", OopsCode.UNKNOWN_TYPE, "malformed"),
        ("ignored", None, "ignored"),
        ("busy", None, "retry"),
        ("deferred", None, "retry"),
    ],
)
def test_how_an_outcome_is_labelled_in_an_agentmail_inbox(
    status: str, oops: OopsCode | None, label: str
) -> None:
    assert disposition(status, oops) == label
