"""The worker's Prometheus metrics (`worker serve --metrics HOST:PORT`, README "Metrics").

Events are counted in the hot path, as they happen (a Counter's inc or a Histogram's
observe, about a microsecond each): messages by type and outcome, OOPS by code, money
received, handling and verification latency. State is read from the ledger when
Prometheus scrapes, by a collector (outbox depth and age): a scrape costs two indexed
queries, a message costs nothing more for it.

Each WorkerMetrics has its own CollectorRegistry, never the process-global one, so tests
and several services in one process do not collide. Jobs are read at scrape time too:
those not finished, by state (queued, running, failed, held, refunding) and the age of
the oldest queued one — a finished job (done, refunded) is history, not a gauge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from envelopay.ledger._sql_base import SqlBase
from envelopay.ledger.store import Store
from envelopay.node.listen import http_endpoint, serve_app
from envelopay.node.observe import Handled

__all__ = ["WorkerMetrics", "jobs_state", "metrics_endpoint", "start_metrics"]

# Latency buckets in seconds: a DKIM check from cache is sub-millisecond, a rail's RPC
# round trip tens of milliseconds, a slow chain seconds.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_TYPES = frozenset(("which", "methods", "pay", "order", "fulfill", "invoice", "offer", "accept", "oops"))


class WorkerMetrics:
    """The worker's metric families, in their own registry."""

    def __init__(self, store: Store, address: str, clock: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.messages = Counter("envelopay_worker_messages", "Inbound messages handled, by protocol type"
                                " and outcome.", ["type", "outcome"], registry=r)
        self.oops = Counter("envelopay_worker_oops", "Inbound messages refused, by the OOPS code of the"
                            " refusal.", ["code"], registry=r)
        self.received = Counter("envelopay_worker_received_units", "Money received by processed"
                                " messages whose proof the rail accepted, in the asset's smallest units.",
                                ["chain", "token"], registry=r)
        self.handling = Histogram("envelopay_worker_handling_seconds", "Time to handle one inbound message:"
                                  " DKIM verification and the engine's step, not the reply's delivery.",
                                  buckets=_BUCKETS, registry=r)
        self.dkim = Histogram("envelopay_worker_dkim_verification_seconds", "DKIM verification of one"
                              " inbound message, key lookup included.", buckets=_BUCKETS, registry=r)
        self.proof = Histogram("envelopay_worker_proof_verification_seconds", "One payment proof verified"
                               " by its rail, by chain.", ["chain"], buckets=_BUCKETS, registry=r)
        r.register(OutboxCollector(store, address.lower(), clock))
        r.register(JobsCollector(store, address.lower(), clock))
        # labels() takes the family's lock and builds its key at each call: the hot path
        # keeps each child it met (the label sets are few: types x outcomes, codes, chains).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, family: Counter | Histogram, *labels: str) -> Any:
        key = (id(family), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def __call__(self, handled: Handled) -> None:
        """Count one handled message (AgentNode.watch)."""
        outcome = handled.outcome
        kind = handled.type if handled.type in _TYPES else "none"
        self._child(self.messages, kind, outcome.status).inc()
        if outcome.oops is not None:
            self._child(self.oops, outcome.oops.value).inc()
        got = handled.received
        if got is not None:
            self._child(self.received, got.chain, got.token).inc(got.amount)
        self.handling.observe(handled.seconds)
        if handled.dkim_seconds is not None:
            self.dkim.observe(handled.dkim_seconds)
        for chain, seconds in handled.proofs:
            self._child(self.proof, chain).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class _LedgerCollector(Collector):
    """Gauges one agent's ledger answers when scraped (`clock` ages what it finds)."""

    def __init__(self, store: Store, address: str, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.address = address
        self.clock = clock


class OutboxCollector(_LedgerCollector):
    """Outbox depth and the age of its oldest row, read from the ledger at scrape time
    (the partial index of pending rows: as large as the backlog, not the history)."""

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("envelopay_worker_outbox_pending", "Replies and sends written to the"
                                  " outbox and not delivered yet (retries waiting included).")
        age = GaugeMetricFamily("envelopay_worker_outbox_oldest_seconds", "Age of the oldest undelivered"
                                " outbox row; 0 when the outbox is empty.")
        count, oldest = outbox_state(self.store, self.address)
        depth.add_metric([], count)
        age.add_metric([], max(0.0, (self.clock() - oldest).total_seconds()) if oldest is not None else 0.0)
        yield depth
        yield age


def outbox_state(store: Store, sender: str) -> tuple[int, datetime | None]:
    """(pending rows, created_at of the oldest) of `sender`'s outbox, on either ledger
    backend (a PostgreSQL ledger may be shared by several agents)."""
    if not isinstance(store, SqlBase):
        raise TypeError(f"outbox metrics need a SQL ledger, not {type(store).__name__}")
    with store.read() as x:
        row = x.one("SELECT COUNT(*) AS n FROM ep_outbox WHERE status = 'pending' AND sender = ?", (sender,))
        first = x.one("SELECT created_at FROM ep_outbox WHERE status = 'pending' AND sender = ?"
                      " ORDER BY seq LIMIT 1", (sender,))
    return (int(row["n"]) if row else 0), (store.ut(first["created_at"]) if first else None)


# The states a job leaves (SPEC "Jobs"); done and refunded are where it stays.
UNFINISHED = ("queued", "running", "failed", "held", "refunding")


class JobsCollector(_LedgerCollector):
    """Jobs not finished, by state, and the wait of the oldest queued one, read from the
    ledger at scrape time (the state index: as large as the live jobs, not the history)."""

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("envelopay_worker_jobs", "Jobs not finished, by state (queued, running,"
                                 " failed, held, refunding).", labels=["state"])
        wait = GaugeMetricFamily("envelopay_worker_jobs_oldest_queued_seconds", "Age of the oldest queued"
                                 " job; 0 when none waits.")
        counts, oldest = jobs_state(self.store, self.address)
        for state in UNFINISHED:
            jobs.add_metric([state], counts.get(state, 0))
        wait.add_metric([], max(0.0, (self.clock() - oldest).total_seconds()) if oldest is not None else 0.0)
        yield jobs
        yield wait


def jobs_state(store: Store, local: str) -> tuple[dict[str, int], datetime | None]:
    """(unfinished jobs by state, created_at of the oldest queued) of `local`, on either
    ledger backend (a PostgreSQL ledger may be shared by several workers)."""
    if not isinstance(store, SqlBase):
        raise TypeError(f"job metrics need a SQL ledger, not {type(store).__name__}")
    marks = ", ".join("?" for _ in UNFINISHED)
    with store.read() as x:
        rows = x.all(f"SELECT state, COUNT(*) AS n FROM ep_jobs WHERE state IN ({marks}) AND local = ?"
                     " GROUP BY state", (*UNFINISHED, local))
        first = x.one("SELECT created_at FROM ep_jobs WHERE state = 'queued' AND local = ?"
                      " ORDER BY created_at LIMIT 1", (local,))
    return {r["state"]: int(r["n"]) for r in rows}, (store.ut(first["created_at"]) if first else None)


# -- the listener ---------------------------------------------------------------------------


def metrics_endpoint(text: str) -> tuple[str, int]:
    """`--metrics` as typed: PORT (loopback) or HOST:PORT ([::1]:PORT for IPv6); port 0
    lets the system choose. UsageError names what is wrong."""
    return http_endpoint("--metrics", text)


async def start_metrics(metrics: WorkerMetrics, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve GET /metrics; return the runner (call `cleanup()`) and the URL scraped."""

    async def scrape(_: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", scrape)
    return await serve_app(app, host, port, "/metrics")
