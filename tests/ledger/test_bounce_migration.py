"""Schema v5 on an existing ledger: outbox rows written at v4 gain `bounce_status`
(NULL) and can then be recorded as bounced; the events table appears. Both backends."""

from __future__ import annotations

from pathlib import Path

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.schema import LATEST
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, Store
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound
from envelopay.testing.store import T0


def _row_at_v4(store: SqliteStore | PostgresStore) -> str:
    ob = Outbound("w@v4.test", "b@v4.test", Which(note="what do you take?"), "<v4.out@v4.test>", T0)
    assert store.commit_step(Commit("w@v4.test", T0, {"status": "sent"}, outbox=((ob, None),))) == "ok"
    # Marked sent in v4's own terms: today's mark_sent also clears the v7 claim columns.
    with store.write() as x:
        assert x.exec("UPDATE ep_outbox SET status = 'sent', sent_at = ? WHERE message_id = ?",
                      (store.t(T0), ob.message_id)) == 1
    return ob.message_id


def _after_upgrade(new: Store, mid: str) -> None:
    row = new.outbox_get(mid)
    assert row is not None and row.status == "sent" and row.bounce_status is None
    assert new.mark_bounced(mid, T0, "5.1.1", "550 5.1.1 <b@v4.test>: unknown user")
    row = new.outbox_get(mid)
    assert row is not None and (row.status, row.bounce_status) == ("bounced", "5.1.1")
    assert new.event_done("agentmail", "evt_v5", T0) and new.event_seen("agentmail", "evt_v5")


def test_sqlite_v4_ledger_upgrades_to_bounces(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    old = SqliteStore(path, migrate=False)
    assert old.migrate(target=4) == 4
    mid = _row_at_v4(old)
    old.close()
    new = SqliteStore(path)
    assert new.version() == LATEST
    _after_upgrade(new, mid)
    new.close()


def test_postgres_v4_ledger_upgrades_to_bounces(pg_dsn: str) -> None:
    old = PostgresStore(pg_dsn, migrate=False)
    assert old.migrate(target=4) == 4
    mid = _row_at_v4(old)
    old.close()
    new = PostgresStore(pg_dsn)
    assert new.version() == LATEST
    _after_upgrade(new, mid)
    new.close()
