"""Enforcer retention: finished sends age out, past cap counters go.

- Cap counters (`enf_counters`) count an hour or a day; once the slot is over they
  decide nothing. Slots that ended more than a day ago are deleted (the day's margin
  leaves a give-back racing midnight its row).
- Finished queue rows and direct sends (SENT, FAILED, REJECTED) and their outcome
  records are deleted once not updated within the operator's window. A PENDING or
  APPROVED row is never touched. The window must exceed the duplicate-suppression
  window (`dedupe_window`, 10 minutes by default): `compact_enforcer` refuses a shorter
  one. An agent asking the status of a send older than the window gets `not found`.
- Claims (`enf_claims`) older than the window go when they can refuse nothing any more:
  a duplicate guard's fingerprint claim (it is taken over after `dedupe_window`), and a
  Message-ID claim whose send has been deleted (taken over after `claim_timeout`).
- Spend counters (`enf_spend_counters`) go as the mail cap counters do.
- Refused requests (`enf_refusals`, the activity page's) older than the window go.
- Payment intents are kept, in their smallest form: a finished one (SENT, FAILED,
  REJECTED) not updated within the window keeps every column an answer reads — its key,
  invoice, state, code, amount, asset, payee, tx id and PAY Message-ID, so a retried call
  still gets its first outcome and an INVOICE is still paid once — and drops its request
  (the payment and the email it asked for), its signed transaction bytes and the cap
  increments it took (nothing can hand them back once finished).
- Agents are kept (a killed agent stays killed).

Online: each batch is one statement (DELETE or UPDATE ... RETURNING), beside a serving
enforcer, on both stores.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from envelopay.enforcer.send.backends import PostgresStore
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.errors import UsageError

__all__ = ["EnforcerCompactReport", "compact_enforcer"]

_DAY = 86_400.0


@dataclass
class EnforcerCompactReport:
    cutoff: float
    sends: int = 0
    outcomes: int = 0
    counters: int = 0
    claims: int = 0
    spend_counters: int = 0
    payments: int = 0  # intents compacted
    refusals: int = 0  # refused requests kept for the activity page

    def to_json(self) -> dict[str, float | int]:
        return {
            "cutoff": self.cutoff,
            "sends": self.sends,
            "outcomes": self.outcomes,
            "counters": self.counters,
            "claims": self.claims,
            "spend_counters": self.spend_counters,
            "payments": self.payments,
            "refusals": self.refusals,
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
    await PaymentStore(store).open()  # the spend enforcer's tables, if it never ran here
    finished = _batch(
        store, "enf_sends", "id", "state IN ('SENT', 'FAILED', 'REJECTED') AND updated_at < ?", "updated_at"
    )
    while True:
        rows = await store.execute_sql(
            f"DELETE FROM enf_sends WHERE {finished} RETURNING id", (report.cutoff, batch)
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
    report.claims = await _old_claims(store, report.cutoff, batch)
    day = time.strftime("%Y-%m-%d", time.gmtime(now - _DAY))
    for win, bound in (("h", f"{day}T00"), ("d", day)):
        report.counters += await _past_slots(store, "enf_counters", "agent_id, win, slot", win, bound, batch)
        report.spend_counters += await _past_slots(
            store, "enf_spend_counters", "agent_id, asset, win, slot", win, bound, batch
        )
    report.payments = await _compact_intents(store, report.cutoff, now, batch)
    report.refusals = await _old_refusals(store, report.cutoff, batch)
    return report


async def _old_refusals(store: EnforcerStore, cutoff: float, batch: int) -> int:
    """Delete refused requests older than `cutoff`, oldest first (the activity index)."""
    gone = 0
    rows_of = _batch(store, "enf_refusals", "id", "created_at < ?", "created_at")
    while True:
        rows = await store.execute_sql(
            f"DELETE FROM enf_refusals WHERE {rows_of} RETURNING 1", (cutoff, batch)
        )
        gone += len(rows)
        if len(rows) < batch:
            return gone


def _batch(store: EnforcerStore, table: str, key: str, where: str, order: str) -> str:
    """The rows of one batch (`where`, first `?` rows by `order`) as a condition on `table`:
    on PostgreSQL by their physical address (the array is computed once, then a TID scan;
    an `IN (subquery)` there is planned as a hash join against a walk of the whole table),
    on SQLite by `key`."""
    pick = f"SELECT {{}} FROM {table} WHERE {where} ORDER BY {order} LIMIT ?"
    if isinstance(store, PostgresStore):
        return f"ctid = ANY(ARRAY({pick.format('ctid')}))"
    return f"({key}) IN ({pick.format(key)})"


async def _past_slots(store: EnforcerStore, table: str, key: str, win: str, bound: str, batch: int) -> int:
    """Delete a counter table's slots of window `win` before `bound`, oldest first."""
    gone = 0
    rows_of = _batch(store, table, key, "win = ? AND slot < ?", "slot")
    while True:
        rows = await store.execute_sql(
            f"DELETE FROM {table} WHERE {rows_of} RETURNING 1", (win, bound, batch)
        )
        gone += len(rows)
        if len(rows) < batch:
            return gone


async def _old_claims(store: EnforcerStore, cutoff: float, batch: int) -> int:
    """Delete claims older than `cutoff` that refuse nothing any more (module docstring):
    each kind a walk up `at` that starts each batch where the last one stopped, so a
    Message-ID claim still held by a kept send (one awaiting approval) is passed over once."""
    gone = 0
    orphan = " AND NOT EXISTS (SELECT 1 FROM enf_sends s WHERE s.id = c.send_id)"
    for kind, extra in (("fp", ""), ("msgid", orphan)):
        where = f"kind = ? AND at >= ? AND at < ?{extra}"
        rows_of = _batch(store, "enf_claims c", "agent_id, kind, claim_key", where, "at")
        since = float("-inf")
        while True:
            rows = await store.execute_sql(
                f"DELETE FROM enf_claims WHERE {rows_of} RETURNING at", (kind, since, cutoff, batch)
            )
            gone += len(rows)
            if len(rows) < batch:
                break
            since = max(float(r[0]) for r in rows)
    return gone


async def _compact_intents(store: EnforcerStore, cutoff: float, now: float, batch: int) -> int:
    """Finished intents not updated since `cutoff`, in their smallest form (module
    docstring). A counter-leg's request had no email (`mail` null); every other intent's
    had one, which the answer's Message-ID needs to know."""
    done = 0
    rows_of = _batch(
        store, "enf_payments", "id",
        "state IN ('SENT', 'FAILED', 'REJECTED') AND compacted_at IS NULL AND updated_at < ?", "updated_at",
    )
    while True:
        rows = await store.execute_sql(
            "UPDATE enf_payments SET request = CASE kind WHEN 'counter' THEN ? ELSE ? END,"
            f" tx_blob = NULL, taken = '[]', compacted_at = ? WHERE {rows_of} RETURNING 1",
            (_COMPACTED_COUNTER, _COMPACTED, now, cutoff, batch),
        )
        done += len(rows)
        if len(rows) < batch:
            return done


_COMPACTED = json.dumps({"mail": {}, "compacted": True})
_COMPACTED_COUNTER = json.dumps({"mail": None, "compacted": True})
