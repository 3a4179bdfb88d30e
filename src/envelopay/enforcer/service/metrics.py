"""The enforcer's Prometheus metrics, served at GET /metrics beside its API (README
"Metrics").

Events are counted in the send route as they happen (a Counter's inc and a Histogram's
observe, about a microsecond each): send requests by type and disposition, refusals by
code, the route's latency. State is read from the store when Prometheus scrapes:
approvals pending, payment intents not finished yet by state, and each active agent's
cap headroom (mail sends and spend left this hour and today). Every query reads an index
whose size is the live state, not the history: the queue's and the in-flight payments'
partial indexes, the agents, and the counters of the current slots.

Each EnforcerMetrics has its own CollectorRegistry, never the process-global one, so
tests and several services in one process do not collide. Labels hold only values of a
closed set or names the operator chose (agent names, asset keys): never agent input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from envelopay.enforcer.send.model import Disposition
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.intent import IN_FLIGHT
from envelopay.enforcer.spend.policy import SpendPolicy
from envelopay.protocol.messages import MessageType

__all__ = ["EnforcerMetrics"]

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_TYPES = frozenset(t.value for t in MessageType)
# Payment intents an operator watches: held, approved, and on their way (a finished one,
# SENT, FAILED or REJECTED, is history: counting those would scan every payment ever made).
OPEN_STATES = ("PENDING", "APPROVED", *IN_FLIGHT)
# The predicates of the store's partial indexes, spelled as the store spells them, so the
# planner reads the index (send/schema.py enf_sends_queue; spend/schema.py
# enf_payments_decided and enf_payments_in_flight).
_QUEUED = "(decided_at IS NOT NULL OR state = 'PENDING')"
_MOVING = f"state IN ({', '.join(repr(s) for s in ('APPROVED', *IN_FLIGHT))})"
_SQL = {
    "mail_pending": f"SELECT COUNT(*) FROM enf_sends WHERE state = 'PENDING' AND {_QUEUED}",
    "pay_pending": f"SELECT COUNT(*) FROM enf_payments WHERE state = 'PENDING' AND {_QUEUED}",
    "pay_moving": f"SELECT state, COUNT(*) FROM enf_payments WHERE {_MOVING} GROUP BY state",
    "mail_caps": "SELECT a.name, a.hourly_cap, a.daily_cap, h.sends, d.sends FROM enf_agents a"
    " LEFT JOIN enf_counters h ON h.agent_id = a.id AND h.win = 'h' AND h.slot = ?"
    " LEFT JOIN enf_counters d ON d.agent_id = a.id AND d.win = 'd' AND d.slot = ?"
    " WHERE a.status = 'ACTIVE'",
    "policies": "SELECT a.id, a.name, p.policy FROM enf_spend_policies p"
    " JOIN enf_agents a ON a.id = p.agent_id WHERE a.status = 'ACTIVE'",
    "spent": "SELECT agent_id, asset, win, spent FROM enf_spend_counters"
    " WHERE (win = 'h' AND slot = ?) OR (win = 'd' AND slot = ?)",
}
_WINDOWS = (("h", "hour"), ("d", "day"))


class EnforcerMetrics:
    """The enforcer's metric families, in their own registry."""

    def __init__(
        self, store: EnforcerStore, *, payments: bool, clock: Callable[[], float] = time.time
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sends = Counter("envelopay_enforcer_sends", "Send requests answered, by protocol type"
                             " (none: plain mail; other: an unknown type) and disposition.",
                             ["type", "disposition"], registry=r)
        self.refused = Counter("envelopay_enforcer_refusals", "Send requests blocked, by refusal code"
                               " (none: a refusal without one, e.g. an unknown token).", ["code"], registry=r)
        self.seconds = Histogram("envelopay_enforcer_send_seconds", "Time to answer one send request:"
                                 " the checks, the caps and, for a direct send, its delivery.",
                                 buckets=_BUCKETS, registry=r)
        self.state = StateCollector(store, payments=payments, clock=clock)
        r.register(self.state)
        # labels() takes the family's lock and builds its key at each call: the route
        # keeps each child it met (types x dispositions and codes are closed sets).
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, family: Counter, *labels: str) -> Any:
        key = (id(family), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child

    def answered(self, body: Mapping[str, Any] | None, disposition: Disposition, seconds: float) -> None:
        """Count one answered send request (the route calls this; `body` None: unreadable)."""
        kind = body.get("type") if body is not None else None
        label = "none" if kind is None else kind if isinstance(kind, str) and kind in _TYPES else "other"
        self._child(self.sends, label, disposition.status).inc()
        if disposition.status == "blocked":
            self._child(self.refused, disposition.code or "none").inc()
        self.seconds.observe(seconds)

    def summary(self) -> str:
        """What this process answered since it started (`enforcer serve` prints it at
        stop): send requests by disposition, refusals by code."""
        by_disposition = self._totals(self.sends, "disposition")
        refusals = self._totals(self.refused, "code")
        total = sum(by_disposition.values())
        counts = ", ".join(f"{n} {d}" for d, n in sorted(by_disposition.items())) or "none"
        line = f"summary: {total} send request(s): {counts}"
        if refusals:
            line += "; refusals: " + ", ".join(f"{code} {n}" for code, n in sorted(refusals.items()))
        return line

    @staticmethod
    def _totals(family: Counter, label: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for metric in family.collect():
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    key = sample.labels[label]
                    out[key] = out.get(key, 0) + int(sample.value)
        return out

    async def exposition(self) -> bytes:
        """The text format, with the store's state read now (StoreError propagates)."""
        await self.state.refresh()
        return generate_latest(self.registry)


@dataclass
class Snapshot:
    """The store's state at one scrape."""

    approvals: dict[str, int] = field(default_factory=dict)  # kind -> pending
    payments: dict[str, int] = field(default_factory=dict)  # open state -> intents
    mail: list[tuple[str, str, int]] = field(default_factory=list)  # (agent, window, sends left)
    spend: list[tuple[str, str, str, int]] = field(default_factory=list)  # (agent, asset, window, left)


class StateCollector(Collector):
    """Gauges of the store's state: `refresh()` reads it (async, on the store), then the
    registry's `collect()` reports that snapshot."""

    def __init__(self, store: EnforcerStore, *, payments: bool, clock: Callable[[], float]) -> None:
        self.store = store
        self.payments = payments  # the spend tables exist only when the spend enforcer runs
        self.clock = clock
        self.snapshot = Snapshot()

    async def refresh(self) -> None:
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime(self.clock()))  # the slots send/enforcer.py counts in
        day = hour[:10]
        snap = Snapshot()
        snap.approvals["mail"] = await self._count("mail_pending")
        caps = await self.store.execute_sql(_SQL["mail_caps"], (hour, day))
        for name, hourly, daily, used_h, used_d in caps:
            snap.mail.append((name, "hour", _left(hourly, used_h)))
            snap.mail.append((name, "day", _left(daily, used_d)))
        if self.payments:
            held = await self._count("pay_pending")
            snap.approvals["payment"] = held
            snap.payments = dict.fromkeys(OPEN_STATES, 0)
            snap.payments["PENDING"] = held
            for state, n in await self.store.execute_sql(_SQL["pay_moving"], ()):
                snap.payments[state] = int(n)
            snap.spend = await self._spend(hour, day)
        self.snapshot = snap

    async def _count(self, name: str) -> int:
        rows = await self.store.execute_sql(_SQL[name], ())
        return int(rows[0][0]) if rows else 0

    async def _spend(self, hour: str, day: str) -> list[tuple[str, str, str, int]]:
        spent: dict[tuple[str, str, str], int] = {}
        for agent_id, asset, win, amount in await self.store.execute_sql(_SQL["spent"], (hour, day)):
            spent[(agent_id, asset, win)] = int(amount)
        out = []
        for agent_id, name, text in await self.store.execute_sql(_SQL["policies"], ()):
            try:
                policy = SpendPolicy.from_json(json.loads(text))
            except ValueError:  # the store holds only what put_policy checked; skip, never fail a scrape
                continue
            for asset, limit in sorted(policy.limits.items()):
                for win, window in _WINDOWS:
                    cap = limit.hourly if win == "h" else limit.daily
                    if cap is not None:
                        out.append((name, asset, window, _left(cap, spent.get((agent_id, asset, win)))))
        return out

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        pending = GaugeMetricFamily("envelopay_enforcer_approvals_pending", "Requests held for an"
                                    " operator's decision, by kind (mail, payment).", labels=["kind"])
        for kind, n in sorted(snap.approvals.items()):
            pending.add_metric([kind], n)
        yield pending
        mail = GaugeMetricFamily("envelopay_enforcer_mail_cap_remaining", "Sends an active agent may"
                                 " still make before its cap holds them, this hour and today.",
                                 labels=["agent", "window"])
        for agent, window, left in snap.mail:
            mail.add_metric([agent, window], left)
        yield mail
        if not self.payments:
            return
        payments = GaugeMetricFamily("envelopay_enforcer_payments", "Payment intents not finished yet,"
                                     " by state.", labels=["state"])
        for state in OPEN_STATES:
            payments.add_metric([state], snap.payments.get(state, 0))
        yield payments
        spend = GaugeMetricFamily("envelopay_enforcer_spend_cap_remaining", "Smallest units of an asset an"
                                  " active agent may still pay before its spend cap holds payments, this"
                                  " hour and today (assets whose policy sets that cap).",
                                  labels=["agent", "asset", "window"])
        for agent, asset, window, left in snap.spend:
            spend.add_metric([agent, asset, window], left)
        yield spend


def _left(cap: int, used: int | None) -> int:
    return max(0, int(cap) - int(used or 0))
