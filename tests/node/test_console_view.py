"""The worker console's rows (node/console_view.py, pure): which inbound entries count as
money received, revenue per day per rail in human and smallest units, and the rows of a
flow's messages and of jobs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.ledger.store import LogEntry, RefundLine
from envelopay.ledger.summaries import JobLine
from envelopay.node.console_view import job_row, message_row, received_in, revenue_rows

DAY1 = datetime(2026, 5, 1, 23, 59, 59, tzinfo=UTC)
DAY2 = DAY1 + timedelta(seconds=2)  # just past midnight UTC: the next day


def decimals(chain: str, token: str) -> int | None:
    return {"USDC": 6, "SOL": 9}.get(token) if chain.startswith("solana") else None


def entry(at: datetime, type_: str, body: dict[str, Any], verdict: dict[str, Any] | None,
          oops: str | None = None, direction: str = "in") -> LogEntry:
    return LogEntry("flow_1", at, direction, type_, "<m@x>", "id_1", "b@x", "w@x", body, verdict, oops)


def pay(amount: str, chain: str = "solana-local", token: str = "USDC") -> dict[str, Any]:
    return {"type": "pay", "amount": amount, "chain": chain, "token": token}


def test_only_accepted_inbound_payments_count_with_the_amount_the_rail_saw() -> None:
    ok = {"status": "ok", "observed_amount": "300000"}
    seen = received_in(entry(DAY1, "pay", pay("250000"), ok))
    assert seen is not None and seen.units == 300000
    named = received_in(entry(DAY1, "pay", pay("250000"), {"status": "ok", "observed_amount": None}))
    assert named is not None and named.units == 250000
    assert received_in(entry(DAY1, "pay", pay("250000"), {"status": "mismatch"})) is None
    assert received_in(entry(DAY1, "pay", pay("250000"), ok, oops="invoice_expired")) is None
    assert received_in(entry(DAY1, "pay", pay("250000"), ok, direction="out")) is None
    assert received_in(entry(DAY1, "pay", {"type": "pay", "amount": "x"}, {"status": "ok"})) is None
    offer = {"type": "offer", "give": {"amount": "5", "chain": "solana-local", "token": "SOL"}}
    got = received_in(entry(DAY1, "offer", offer, {"status": "ok", "observed_amount": "5"}))
    assert got is not None and (got.chain, got.token, got.units) == ("solana-local", "SOL", 5)


def test_revenue_is_summed_per_utc_day_and_rail_newest_day_first() -> None:
    ok = {"status": "ok"}
    entries = [
        entry(DAY1, "pay", pay("250000"), ok),
        entry(DAY1, "pay", pay("1"), ok),
        entry(DAY1, "pay", pay("7", chain="base-local", token="ETH"), ok),  # decimals unknown
        entry(DAY2, "pay", pay("1000000"), ok),
        entry(DAY2, "pay", pay("999"), {"status": "mismatch"}),
    ]
    rows = revenue_rows(entries, decimals)
    assert [(r["day"], r["chain"], r["human"], r["units"], r["payments"]) for r in rows] == [
        ("2026-05-02", "solana-local", "1 USDC", 1000000, 1),
        ("2026-05-01", "base-local", "7 base units of ETH", None, 1),
        ("2026-05-01", "solana-local", "0.250001 USDC", 250001, 2),
    ]
    assert revenue_rows([], decimals) == []


def test_refunds_paid_show_beside_the_revenue_of_their_day_and_rail() -> None:
    # Seen on a new-user walk: two of three payments refunded, the day's revenue read 0.75 USDC.
    ok = {"status": "ok"}
    entries = [entry(DAY1, "pay", pay("250000"), ok), entry(DAY1, "pay", pay("250000"), ok)]
    sol = ("solana-local", "USDC")
    back = [RefundLine("job:j1", "f1", "b@x", *sol, 250000, "task_failed", "paid", "T1", DAY1),
            RefundLine("pay:x", "f2", "b@x", *sol, 50000, "overpaid", "paid", "T2", DAY2)]
    rows = revenue_rows(entries, decimals, back)
    assert [(r["day"], r["human"], r["payments"], r["refunded"], r["refunded_units"]) for r in rows] == [
        ("2026-05-02", "0 USDC", 0, "0.05 USDC", 50000),  # a refund on a day with no receipts
        ("2026-05-01", "0.5 USDC", 2, "0.25 USDC", 250000),
    ]
    assert revenue_rows(entries, decimals)[0]["refunded"] == ""  # nothing went back: an empty cell


def test_message_and_job_rows_carry_human_amounts_beside_raw_units() -> None:
    row = message_row(entry(DAY1, "pay", pay("250000"), {"status": "ok"}), decimals)
    assert row["type"] == "PAY" and row["verdict"] == "ok" and row["at"] == "2026-05-01 23:59:59"
    assert row["amount"] == {"human": "0.25 USDC", "units": 250000, "chain": "solana-local"}
    ordered = entry(DAY1, "order", {"type": "order", "task": {"name": "word_count"}}, None)
    order = message_row(ordered, decimals)
    assert order["amount"] is None and order["task"] == "word_count"
    job = JobLine("job_1", "flow_1", "b@x", "word_count", "refunded", "solana-local", "USDC", 250000, "boom",
                  {"amount": "250000", "proof": "T"}, DAY1)
    shown = job_row(job, decimals)
    assert shown["paid"] == {"human": "0.25 USDC", "units": 250000} and shown["refund"] == shown["paid"]
    free = job_row(JobLine("job_2", "flow_2", "b@x", "t", "done", None, None, 0, None, None, DAY1), decimals)
    assert free["paid"] == {"human": "free", "units": None} and free["refund"] is None
