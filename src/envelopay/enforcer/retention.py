"""Enforcer retention: finished sends age out, past cap counters go.

- Cap counters (`enf_counters`) count an hour or a day; once the slot is over they
  decide nothing. Slots that ended more than a day ago are deleted (the day's margin
  leaves a give-back racing midnight its row).
- Finished queue rows and direct sends (SENT, FAILED, REJECTED) and their outcome
  records are deleted once not updated within the operator's window. A PENDING or
  APPROVED row is never touched. The window must exceed the duplicate-suppression
  window (`dedupe_window`, 10 minutes by default): `compact_enforcer` refuses a shorter
  one. An agent asking the status of a send older than the window gets `not found`.
- Agents are kept (a killed agent stays killed).

Online: each batch is one statement (DELETE ... RETURNING), beside a serving enforcer,
on both stores.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from envelopay.enforcer.store import EnforcerStore
from envelopay.errors import UsageError

__all__ = ["EnforcerCompactReport", "compact_enforcer"]

_DAY = 86_400.0


@dataclass
class EnforcerCompactReport:
    cutoff: float
    sends: int = 0
    outcomes: int = 0
    counters: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {
            "cutoff": self.cutoff,
            "sends": self.sends,
            "outcomes": self.outcomes,
            "counters": self.counters,
        }


async def compact_enforcer(
    store: EnforcerStore, *, older_than: float, now: float, batch: int = 500, dedupe_window: float = 600.0
) -> EnforcerCompactReport:
    """Delete finished sends not updated for `older_than` seconds, and past counters."""
    if older_than <= dedupe_window:
        raise UsageError(
            f"the retention window ({older_than:.0f} s) must be longer than the duplicate window"
            f" ({dedupe_window:.0f} s)"
        )
    report = EnforcerCompactReport(now - older_than)
    while True:
        rows = await store.execute_sql(
            "DELETE FROM enf_sends WHERE id IN (SELECT id FROM enf_sends"
            " WHERE state IN ('SENT', 'FAILED', 'REJECTED') AND updated_at < ? ORDER BY updated_at LIMIT ?)"
            " RETURNING id",
            (report.cutoff, batch),
        )
        if rows:
            ids = [r[0] for r in rows]
            marks = ",".join("?" * len(ids))
            gone = await store.execute_sql(
                f"DELETE FROM enf_outcomes WHERE send_id IN ({marks}) RETURNING 1", ids
            )
            report.sends += len(ids)
            report.outcomes += len(gone)
        if len(rows) < batch:
            break
    day = time.strftime("%Y-%m-%d", time.gmtime(now - _DAY))
    for win, bound in (("h", f"{day}T00"), ("d", day)):
        while True:
            rows = await store.execute_sql(
                "DELETE FROM enf_counters WHERE (agent_id, win, slot) IN (SELECT agent_id, win, slot"
                " FROM enf_counters WHERE win = ? AND slot < ? ORDER BY slot LIMIT ?) RETURNING 1",
                (win, bound, batch),
            )
            report.counters += len(rows)
            if len(rows) < batch:
                break
    return report
