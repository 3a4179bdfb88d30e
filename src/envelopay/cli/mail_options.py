"""The options of a mail command read into the values the mailbox takes: filters, the
reply text, SMTP and IMAP servers. (Which mailbox to open: `envelopay.mail.mailbox.site`.)

Every refusal is a MailboxError whose message names the option and whose `field` is the
option's name, so that a front end can answer with it as it stands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError
from envelopay.mail.imap import ImapConfig
from envelopay.mail.mailbox import CheckFilter
from envelopay.mail.mailbox.site import refused
from envelopay.mail.transport.lmtp_client import tcp_port
from envelopay.mail.transport.smtp import SmtpConfig

__all__ = ["check_filter", "imap_config", "reply_text", "smtp_config"]


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
