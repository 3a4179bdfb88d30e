"""Where an agent's mailbox lives and how a front end opens it: with the garden's
deliveries picked up first, and progress shown on a terminal; and `fetch_imap`, the IMAP
copy into it. A refusal is a MailboxError whose `field` names the option at fault.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from envelopay.mail.imap import ImapConfig, ImapSource, SyncState
from envelopay.mail.mailbox.actions import Mailbox
from envelopay.mail.mailbox.inputs import MailboxError
from envelopay.mail.mailbox.scan import terminal_progress

__all__ = ["MailboxSite", "fetch_imap", "open_site", "refused", "site_from_env"]


def refused(message: str, field: str | None = None, code: str = "usage") -> MailboxError:
    """A refusal whose text is `message` as given; `field` names the option at fault."""
    exc = MailboxError(code, message)
    exc.field = field
    return exc


@dataclass(frozen=True)
class MailboxSite:
    """Where a mailbox lives: the agent directory, its own address, and its inbox when the
    inbox is elsewhere (a garden Maildir)."""

    root: Path | None
    address: str | None
    inbox: Path | None = None


def site_from_env(
    directory: Path | None, address: str | None, env: Mapping[str, str] = os.environ
) -> MailboxSite:
    """Explicit choices first, then $ENVELOPAY_AGENT_DIR and $ENVELOPAY_ADDRESS."""
    env_dir = env.get("ENVELOPAY_AGENT_DIR")
    return MailboxSite(
        directory or (Path(env_dir) if env_dir else None), address or env.get("ENVELOPAY_ADDRESS") or None
    )


@contextmanager
def open_site(site: MailboxSite) -> Iterator[Mailbox]:
    """The mailbox at `site`, with garden deliveries picked up first; closed afterwards."""
    try:
        box = Mailbox(
            site.root or Path("."),
            address=site.address,
            inbox=site.inbox,
            progress=terminal_progress(what="upgrading the mailbox index"),
        )
    except OSError as exc:
        raise refused(
            f"dir: cannot open the mailbox under {site.root}: {exc.strerror or exc}", "dir"
        ) from exc
    except KeyboardInterrupt:
        _interrupted()
        raise
    try:
        try:
            box.refresh(progress=terminal_progress())
        except KeyboardInterrupt:
            _interrupted()
            raise
        yield box
    finally:
        box.close()


def _interrupted() -> None:
    """Ctrl-C during an upgrade or a first indexing: end the progress line and say so."""
    if sys.stderr.isatty():
        sys.stderr.write("\ninterrupted: what is indexed is kept, the next command goes on from there\n")


def fetch_imap(box: Mailbox, cfg: ImapConfig, *, idle: bool, started: Callable[[], None]) -> int:
    """Copy unprocessed IMAP mail into `box` once, or with `idle` until SIGINT/SIGTERM;
    returns how many messages were stored (and flagged on the server)."""
    source = ImapSource(cfg, SyncState.load(box.root / "imap-state.json"))

    async def run() -> int:
        if not idle:
            return await source.sync_once(box.imap_consumer)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        started()
        await source.run(box.imap_consumer, stop)
        return source.stats.marked

    return asyncio.run(run())
