"""`worker serve`'s summary at stop says what went back (seen on a new-user walk: a run whose
two paid jobs both failed and were refunded ended `received: 0.5 USDC on solana-local` and
nothing more, which reads as income): the refunds paid while it served, per rail, read from
the ledger (a job's runner and the engine pay them, not a message's handling)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from envelopay.ledger.store import RefundLine
from envelopay.node.serve_log import ServeLog

NOW = datetime(2026, 12, 4, 20, 1, 2, tzinfo=UTC)
BACK = [RefundLine("job:j1", "f1", "b@x", "solana-local", "USDC", 250000, "task_failed", "paid", "T1", NOW),
        RefundLine("pay:p2", "f2", "b@x", "solana-local", "USDC", 50000, "overpaid", "paid", "T2", NOW)]


def usdc(chain: str, token: str) -> int | None:
    return 6 if token == "USDC" else None


def _log(fmt: str) -> ServeLog:
    ticks = iter([NOW, NOW + timedelta(seconds=5)])
    log = ServeLog(lambda _: None, fmt, usdc, clock=lambda: next(ticks))  # type: ignore[arg-type]
    log.received[("solana-local", "USDC")] += 550000
    return log


def test_the_text_summary_says_what_was_refunded_beside_what_was_received() -> None:
    assert _log("text").summary(BACK).splitlines()[-2:] == [
        "  received: 0.55 USDC on solana-local (550000 units)",
        "  refunded: 0.3 USDC on solana-local (300000 units), 2 refund(s)",
    ]
    assert "refunded" not in _log("text").summary()  # none paid: no line


def test_the_json_summary_lists_refunds_per_rail() -> None:
    doc = json.loads(_log("json").summary(BACK))
    assert doc["refunded"] == [{"chain": "solana-local", "token": "USDC", "amount": "300000", "decimals": 6,
                                "human": "0.3", "refunds": 2}]
    assert doc["received"] == [{"chain": "solana-local", "token": "USDC", "amount": "550000", "decimals": 6,
                                "human": "0.55"}]
    assert json.loads(_log("json").summary())["refunded"] == []
