"""The mailbox index kit (envelopay.testing.mailbox_store) on the SQLite index, able to fail."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from envelopay.mail.mailbox.index import MailIndex
from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.testing.mailbox_store import MAILBOX_CHECKS, check_mailbox_store


def test_mailbox_store_kit(tmp_path: Path) -> None:
    n = itertools.count()
    assert check_mailbox_store(lambda: MailIndex(tmp_path / f"{next(n)}.sqlite")) == [
        c.__name__ for c in MAILBOX_CHECKS
    ]


class _NoThreads(MailIndex):
    """An index that forgets to merge threads: the kit must say so."""

    def _join_thread(self, mid: str, links: list[str], ts: float) -> str:
        thread = f"t:{mid}"
        self._touch_thread(thread, ts)
        return thread


def test_the_mailbox_kit_can_fail(tmp_path: Path) -> None:
    n = itertools.count()
    with pytest.raises(AssertionError, match="check_threads"):
        check_mailbox_store(lambda: _NoThreads(tmp_path / f"{next(n)}.sqlite"))


def _versions(path: Path) -> list[tuple[str, int, str]]:
    with sqlite3.connect(path) as db:
        return [tuple(r) for r in db.execute("SELECT component, version, applied_at FROM ep_versions")]


def test_the_index_is_on_the_one_migrator(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    MailIndex(path).close()  # a new file: the step runs and is recorded
    (got,) = _versions(path)
    assert got[:2] == ("mailbox", 5) and got[2] != "adopted"
    again = MailIndex(path)
    assert again.db.total_changes == 0, "an up-to-date index is opened without a write"
    again.close()


def test_a_v5_index_of_an_earlier_release_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "index.sqlite3"
    ix = MailIndex(path)
    ix.add("m1", "inbox", "n1", Interpretation(subject="kept"), [], ts=1.0, file="new/n1")
    ix.close()
    with sqlite3.connect(path) as db:  # what the release before the migrator left: v5, no record
        db.execute("DROP TABLE ep_versions")
    ix = MailIndex(path)
    got = ix.get("m1")
    assert got is not None and got.subject == "kept"
    ix.close()
    assert _versions(path) == [("mailbox", 5, "adopted")]
