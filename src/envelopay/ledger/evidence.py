"""What a flow's evidence folder is made of and the rest of the ledger does not keep: each
mail's raw bytes exactly as received or sent, and each DKIM key record as it was seen
when a signature was checked (or, for our own key, when we signed with it).

The flow log keeps bodies, not bytes; a DKIM signature covers bytes, and a DNS record
may change after the fact, so both are kept here, at the moment they mattered
(`envelopay evidence FLOW`, client/evidence.py, reads them back). Own migrator component
("evidence") on the one migrator, so its versions never collide with the ledger's; both
backends. Writes are single INSERT ... ON CONFLICT DO NOTHING: the first bytes recorded
under a Message-ID stay (a retransmission, a resend after a crash: the same mail).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from envelopay.ledger._sql import Executor, SqlStore
from envelopay.ledger.schema import Dialect
from envelopay.ledger.store import Store
from envelopay.persist import Migrations, Step, migrate

__all__ = ["EVIDENCE_MIGRATIONS", "EvidenceLog", "KeptMail", "SeenKey", "evidence_log", "forget_flows"]

_TABLES = """
CREATE TABLE ep_raw_mail (
    local TEXT NOT NULL, message_id TEXT NOT NULL, direction TEXT NOT NULL, at {T} NOT NULL,
    raw {B} NOT NULL, PRIMARY KEY (local, message_id, direction));
CREATE TABLE ep_dkim_seen (
    name TEXT NOT NULL, record TEXT NOT NULL, source TEXT NOT NULL, first_seen {T} NOT NULL,
    PRIMARY KEY (name, record))
"""
_TYPES = {"sqlite": ("TEXT", "BLOB"), "postgres": ("TIMESTAMPTZ", "BYTEA")}


def _statements(dialect: Dialect) -> list[str]:
    t, b = _TYPES[dialect]
    text = _TABLES.replace("{T}", t).replace("{B}", b)
    return [s.strip() for s in text.split(";") if s.strip()]


EVIDENCE_MIGRATIONS = Migrations(
    "evidence",
    (Step(1, "raw mails and DKIM keys as seen", {"sqlite": _statements("sqlite"),
                                                 "postgres": _statements("postgres")}),),
)


@dataclass(frozen=True, slots=True)
class KeptMail:
    local: str
    message_id: str
    direction: str  # "in" | "out"
    at: datetime
    raw: bytes


@dataclass(frozen=True, slots=True)
class SeenKey:
    name: str  # selector._domainkey.domain, lower case
    record: str  # the TXT record's text
    source: str  # "dns" (looked up to verify) | "signer" (our own key, when we signed)
    first_seen: datetime


class EvidenceLog:
    """The two tables over a ledger's own connections (SQLite or PostgreSQL)."""

    def __init__(self, store: SqlStore) -> None:
        self.store = store
        self.dialect: Dialect = store.dialect
        # Keys already written by this process: a lookup per inbound mail must not cost a
        # write per inbound mail (the row's first_seen is all that matters).
        self._known: set[tuple[str, str]] = set()
        with store.write() as x:
            migrate(x, self.dialect, EVIDENCE_MIGRATIONS, datetime.now(UTC).isoformat())

    def keep_mail(self, local: str, message_id: str, direction: str, raw: bytes, at: datetime) -> None:
        with self.store.write() as x:
            x.exec(
                "INSERT INTO ep_raw_mail (local, message_id, direction, at, raw) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (local, message_id, direction, self.store.t(at), bytes(raw)),
            )

    def keep_key(self, name: str, record: str, source: str, at: datetime) -> None:
        key = (name.lower().rstrip("."), record)
        if key in self._known:
            return
        with self.store.write() as x:
            x.exec(
                "INSERT INTO ep_dkim_seen (name, record, source, first_seen) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (key[0], record, source, self.store.t(at)),
            )
        self._known.add(key)

    def mails(self, local: str, message_ids: Sequence[str]) -> list[KeptMail]:
        if not message_ids:
            return []
        marks = ", ".join("?" * len(message_ids))
        with self.store.read() as x:
            rows = x.all(
                "SELECT local, message_id, direction, at, raw FROM ep_raw_mail"
                f" WHERE local = ? AND message_id IN ({marks}) ORDER BY at, message_id",
                (local, *message_ids),
            )
        return [KeptMail(r["local"], r["message_id"], r["direction"], self.store.ut(r["at"]), bytes(r["raw"]))
                for r in rows]

    def keys(self, names: Sequence[str]) -> list[SeenKey]:
        """Every record seen at each name, oldest first."""
        wanted = sorted({n.lower().rstrip(".") for n in names})
        if not wanted:
            return []
        marks = ", ".join("?" * len(wanted))
        with self.store.read() as x:
            rows = x.all(
                "SELECT name, record, source, first_seen FROM ep_dkim_seen"
                f" WHERE name IN ({marks}) ORDER BY name, first_seen, record",
                tuple(wanted),
            )
        return [SeenKey(r["name"], r["record"], r["source"], self.store.ut(r["first_seen"])) for r in rows]


def evidence_log(store: Store) -> EvidenceLog | None:
    """The evidence tables of a ledger of ours (SQLite, PostgreSQL); None for another Store."""
    return EvidenceLog(store) if isinstance(store, SqlStore) else None


def forget_flows(x: Executor, flow_ids: Sequence[str]) -> int:
    """Retention (ledger/retention.py), inside its transaction: the kept bytes of the mails
    of flows whose log is being removed — without the log no folder can be written, so the
    bytes go with it. Rows removed; 0 on a ledger that never kept any."""
    if not flow_ids or not x.all("SELECT 1 AS found FROM ep_versions WHERE component = 'evidence'"):
        return 0
    marks = ", ".join("?" * len(flow_ids))
    return x.exec(
        "DELETE FROM ep_raw_mail WHERE (local, message_id) IN (SELECT f.local, l.message_id"
        " FROM ep_log l JOIN ep_flows f ON f.flow_id = l.flow_id"
        f" WHERE l.flow_id IN ({marks}) AND l.message_id IS NOT NULL)",
        tuple(flow_ids),
    )
