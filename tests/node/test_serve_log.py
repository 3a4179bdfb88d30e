"""The pieces of `worker serve`'s log and metrics, each on real parts: the serve log's
lines and summary, the outbox gauges on both ledgers, `--metrics` as typed, and a node
watched while it handles messages (the type and sender come from the engine's own parse,
a rail's verify is timed, and an observer that fails costs no message its handling)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from envelopay.engine import BaseApplication, Engine, Outcome
from envelopay.errors import UsageError
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.node.metrics import WorkerMetrics, metrics_endpoint
from envelopay.node.observe import Handled, Received
from envelopay.node.serve_log import ServeLog
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Which

NOW = datetime(2026, 12, 4, 20, 1, 2, 345000, tzinfo=UTC)
ME = "worker@garden.local"


def handled(status: str = "processed", *, sender: str | None = "buyer@garden.local", kind: str | None = "pay",
            oops: OopsCode | None = None, received: Received | None = None, repeat: bool = False) -> Handled:
    outcome = Outcome(status, "<m1@garden.local>", flow_id="f1", oops=oops,  # type: ignore[arg-type]
                      repeat="message_id" if repeat else None)
    return Handled(NOW, kind, sender, outcome, 0.0123, 0.001, (("solana-local", 0.004),), received)


def usdc(chain: str, token: str) -> int | None:
    return 6 if token == "USDC" else None


def test_text_lines_say_time_type_from_flow_outcome_and_ms() -> None:
    lines: list[str] = []
    log = ServeLog(lines.append, "text", usdc, clock=lambda: NOW)
    log(handled(received=Received("solana-local", "USDC", 250000)))
    log(handled("refused", oops=OopsCode.AMOUNT_MISMATCH))
    log(handled("ignored", sender=None, kind=None))
    assert lines == [
        '2026-12-04T20:01:02.345Z type=PAY from=buyer@garden.local flow=f1 outcome=processed'
        ' received="0.25 USDC on solana-local (250000 units)" ms=12.3',
        "2026-12-04T20:01:02.345Z type=PAY from=buyer@garden.local flow=f1 outcome=refused"
        " oops=amount_mismatch ms=12.3",
        "2026-12-04T20:01:02.345Z type=- from=- flow=f1 outcome=ignored ms=12.3",
    ]


def test_a_sender_cannot_forge_a_line_of_its_own() -> None:
    lines: list[str] = []
    ServeLog(lines.append)(handled(sender='x@y.example\n2026-01-01T00:00:00Z type=PAY outcome=processed'))
    assert len(lines) == 1 and "\n" not in lines[0]
    assert 'from="x@y.example\\n2026' in lines[0]


def test_summary_counts_outcomes_oops_and_money_once_per_payment() -> None:
    lines: list[str] = []
    ticks = iter([NOW, NOW + timedelta(seconds=61.3)])
    log = ServeLog(lines.append, "text", usdc, clock=lambda: next(ticks))
    paid = Received("solana-local", "USDC", 250000)
    log(handled(received=paid))
    log(handled(received=Received("base-local", "ETH", 7)))  # decimals unknown here: raw units alone
    log(handled("refused", oops=OopsCode.PROOF_REPLAYED))
    log(handled("ignored", kind=None, sender=None))
    assert log.summary().splitlines() == [
        "summary: 4 message(s) in 61.3 s: 1 ignored, 2 processed, 1 refused",
        "  oops: proof_replayed 1",
        "  received: 7 base units of ETH on base-local",
        "  received: 0.25 USDC on solana-local (250000 units)",
    ]


def test_json_lines_and_summary() -> None:
    lines: list[str] = []
    ticks = iter([NOW, NOW + timedelta(seconds=2)])
    log = ServeLog(lines.append, "json", usdc, clock=lambda: next(ticks))
    log(handled(received=Received("solana-local", "USDC", 1_500_000)))
    log(handled("refused", oops=OopsCode.DKIM_FAILED))
    first = json.loads(lines[0])
    assert first == {"event": "message", "at": "2026-12-04T20:01:02.345Z", "type": "PAY",
                     "from": "buyer@garden.local", "flow": "f1", "outcome": "processed", "oops": None,
                     "repeat": None, "message_id": "<m1@garden.local>", "ms": 12.3,
                     "received": {"chain": "solana-local", "token": "USDC", "amount": "1500000",
                                  "decimals": 6, "human": "1.5"}}
    assert json.loads(lines[1])["oops"] == "dkim_failed"
    summary = json.loads(log.summary())
    assert summary["event"] == "summary" and summary["messages"] == 2 and summary["seconds"] == 2
    assert summary["outcomes"] == {"processed": 1, "refused": 1} and summary["oops"] == {"dkim_failed": 1}
    assert summary["received"] == [first["received"]]


@pytest.mark.parametrize(("typed", "where"), [
    ("9464", ("127.0.0.1", 9464)), ("0", ("127.0.0.1", 0)), ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ("[::1]:9464", ("::1", 9464)), ("localhost:1", ("localhost", 1)),
])
def test_metrics_endpoint_as_typed(typed: str, where: tuple[str, int]) -> None:
    assert metrics_endpoint(typed) == where


@pytest.mark.parametrize("typed", ["", "65536", "host:", ":9464", "x:99999", "²", "9464a", "-1"])
def test_metrics_endpoint_refuses_what_is_no_port(typed: str) -> None:
    with pytest.raises(UsageError, match="--metrics"):
        metrics_endpoint(typed)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    store: Store = (SqliteStore(str(tmp_path / "ledger.db")) if request.param == "sqlite"
                    else PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2))
    store.migrate()
    return store


def gauges(metrics: WorkerMetrics) -> dict[str, float]:
    text = metrics.exposition().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("envelopay_worker_outbox")}


async def test_outbox_gauges_read_the_ledger_at_scrape_time(ledger: Store) -> None:
    clock = [NOW]
    engine = Engine(ledger, address=ME, domain="garden.local", rails={}, app=BaseApplication(),
                    clock=lambda: clock[0])
    metrics = WorkerMetrics(ledger, ME, clock=lambda: clock[0] + timedelta(seconds=90))
    try:
        empty = {"envelopay_worker_outbox_pending": 0, "envelopay_worker_outbox_oldest_seconds": 0}
        assert gauges(metrics) == empty
        first = await engine.send(Which(id="w1"), "b@garden.local")
        clock[0] = NOW + timedelta(seconds=30)
        await engine.send(Which(id="w2"), "c@garden.local")
        other = Engine(ledger, address="other@garden.local", domain="garden.local", rails={},
                       app=BaseApplication(), clock=lambda: NOW - timedelta(hours=1))
        await other.send(Which(id="w3"), "b@garden.local")  # another agent's row on a shared ledger
        assert gauges(metrics) == {"envelopay_worker_outbox_pending": 2,
                                   "envelopay_worker_outbox_oldest_seconds": 120}  # 90 s after NOW+30 s
        assert ledger.mark_sent(first.message_id, NOW)
        assert gauges(metrics)["envelopay_worker_outbox_pending"] == 1
    finally:
        ledger.close()


async def test_a_watched_node_reports_what_the_engine_parsed_and_survives_a_broken_observer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from envelopay.engine.outbox import DirectHook, OutboxDrainer
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.transport.garden import GardenTransport
    from envelopay.node.agent_node import AgentNode
    from envelopay.protocol.compose import compose
    from envelopay.protocol.outbound import Outbound

    store = SqliteStore(str(tmp_path / "ledger.db"))
    store.migrate()
    seen: list[Handled] = []

    def broken(_: Handled) -> None:
        raise RuntimeError("a bug in a log handler")

    async with GardenServer(tmp_path / "garden", ["peer@garden.local"], open_garden=True) as garden:
        transport = GardenTransport(garden.endpoint)
        engine = Engine(store, address=ME, domain="garden.local", rails={}, app=BaseApplication())
        node = AgentNode(engine, OutboxDrainer(store, DirectHook(transport)), None, transport=transport)
        node.watch(broken)
        node.watch(seen.append)
        raw = compose(Outbound("Peer@Garden.local", ME, Which(id="wch_w1"), "<w1@garden.local>", NOW))
        outcome = await node.receive(raw)
        await transport.close()
    store.close()
    assert outcome.message_id == "<w1@garden.local>" and outcome.status in ("processed", "refused")
    (got,) = seen
    assert (got.type, got.sender, got.outcome, got.dkim_seconds, got.received) == (
        "which", "peer@garden.local", outcome, None, None)
    assert got.seconds > 0
    assert "an observer failed" in caplog.text
