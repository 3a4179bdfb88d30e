"""The mailbox index kit (envelopay.testing.mailbox_store) on the SQLite index, able to fail."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from envelopay.mail.mailbox.index import MailIndex
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
