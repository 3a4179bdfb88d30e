"""What a front end needs before and around a mailbox action: which mailbox to open
(and opening it with the garden's deliveries picked up), and the options of an action
read into the values the mailbox takes (filters, the reply text, SMTP and IMAP servers).

Every refusal is a MailboxError whose message names the option and whose `field` is the
option's name, so that a front end can answer with it as it stands.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.errors import ConfigError
from envelopay.mail.imap import ImapConfig, ImapSource, SyncState
from envelopay.mail.lmtp_client import tcp_port
from envelopay.mail.mailbox import CheckFilter, Mailbox, MailboxError
from envelopay.mail.mailbox.scan import terminal_progress
from envelopay.mail.smtp import SmtpConfig

if TYPE_CHECKING:
    from envelopay.mail.imap import ImapConfig
    from envelopay.mail.smtp import SmtpConfig

__all__ = [
    "MailboxSite",
    "check_filter",
    "fetch_imap",
    "imap_config",
    "open_site",
    "refused",
    "reply_text",
    "site_from_env",
    "smtp_config",
]


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


def _when(value: str | None, field: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise refused(f"{field}: not an ISO 8601 timestamp: {value!r}", field, "invalid_filter") from exc
    if parsed.tzinfo is None:
        raise refused(f"{field}: give a timezone, e.g. {value}+00:00", field, "invalid_filter")
    return parsed


def check_filter(*, after: str | None, before: str | None, **fields: Any) -> CheckFilter:
    """A CheckFilter from option values; `after` and `before` are ISO 8601 with a timezone."""
    return CheckFilter(after=_when(after, "after"), before=_when(before, "before"), **fields)


def reply_text(text: str | None, text_file: Path | None) -> str:
    """Exactly one of --message or --message-file ('-' reads stdin)."""
    if (text is None) == (text_file is None):
        raise refused("message: give exactly one of --message or --message-file", "message")
    if text is not None:
        return text
    assert text_file is not None
    try:
        return sys.stdin.read() if str(text_file) == "-" else text_file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise refused(f"message-file: cannot read {text_file}: {exc}", "message-file") from exc


def _host_port(value: str, field: str) -> tuple[str, int]:
    host, sep, text = value.rpartition(":")
    port = tcp_port(text)
    if not sep or not host or port is None:
        raise refused(f"{field}: expected host:port (port 1-65535), got {value!r}", field)
    return host, port


def smtp_config(target: str | None, security: str, env: Mapping[str, str] = os.environ) -> SmtpConfig:
    """The submission server of a reply: --smtp or $ENVELOPAY_SMTP, login from the environment."""
    target = target or env.get("ENVELOPAY_SMTP")
    if not target:
        raise refused("smtp: no transport; pass --smtp host:port or set ENVELOPAY_SMTP", "smtp")
    host, port = _host_port(target, "smtp")
    try:
        return SmtpConfig(
            host=host,
            port=port,
            security=security,  # type: ignore[arg-type]  # SmtpConfig validates it
            username=env.get("ENVELOPAY_SMTP_USER"),
            password=env.get("ENVELOPAY_SMTP_PASSWORD"),
            max_attempts=2,
            backoff_initial=0.5,
        )
    except ConfigError as exc:
        raise refused(f"smtp: {exc}", "smtp") from exc


def imap_config(
    server: str, user: str, mailbox: str, tls: bool, env: Mapping[str, str] = os.environ
) -> ImapConfig:
    """The IMAP source of `mail fetch`; the password comes from $ENVELOPAY_IMAP_PASSWORD only."""
    password = env.get("ENVELOPAY_IMAP_PASSWORD")
    if not password:
        # README's exit table: a secret not set is the environment (3), not bad input.
        raise ConfigError("ENVELOPAY_IMAP_PASSWORD: not set; it holds the IMAP password (never an option)")
    host, port = _host_port(server, "imap")
    try:
        return ImapConfig(host=host, port=port, user=user, password=password, mailbox=mailbox, tls=tls)
    except ConfigError as exc:
        raise refused(str(exc), str(exc).split(":")[0]) from exc


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
