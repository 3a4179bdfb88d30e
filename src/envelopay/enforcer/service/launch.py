"""Starting the enforcer from a front end's options, and the operator credential.

`prepare` reads everything the service needs before it listens (the store, exactly one
outbound transport (envelopay.mail.transport), the optional DKIM signer, the operator
credential, made once with mode 600 when there is none); `serve` runs it until SIGINT or
SIGTERM. Every refusal is a ConfigError naming the option; a file that cannot be read or
written is an OSError.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from envelopay.enforcer.send.backends import open_store
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.service.spend_launch import start_payments
from envelopay.errors import ConfigError
from envelopay.mail.transport import Transport
from envelopay.mail.transport.garden import GardenTransport
from envelopay.mail.transport.lmtp_client import parse_endpoint
from envelopay.mail.transport.smtp import Security, SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport

if TYPE_CHECKING:
    from envelopay.dkim import Signer
    from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
    from envelopay.enforcer.service.spend_launch import SpendLaunch

__all__ = ["Launch", "operator_token", "prepare", "serve"]


def operator_token(path: Path, env: Mapping[str, str] = os.environ) -> str:
    """The operator credential: $ENVELOPAY_OPERATOR_TOKEN, else the token file's content."""
    token = env.get("ENVELOPAY_OPERATOR_TOKEN")
    if token:
        return token
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"cannot read the operator token file {path}: {exc.strerror}") from exc
    if not token:
        raise ConfigError(f"operator token file {path} is empty")
    return token


def _token_or_new(path: Path, env: Mapping[str, str], created: Callable[[Path], None]) -> str:
    if env.get("ENVELOPAY_OPERATOR_TOKEN") or path.exists():
        return operator_token(path, env)
    token = "epo_" + secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    created(path)
    return token


@dataclass(frozen=True)
class Launch:
    """What the service needs, read and checked before it listens."""

    store: SqliteStore | PostgresStore
    transport: Transport
    signer: Signer | None
    operator: str


def _transport(
    garden: str | None,
    smtp_host: str | None,
    smtp_port: int,
    smtp_security: str,
    smtp_user: str | None,
    env: Mapping[str, str],
) -> Transport:
    if (garden is None) == (smtp_host is None):
        raise ConfigError("give exactly one of --smtp-host or --garden")
    if garden is not None:
        # A garden with accounts wants the enforcer's own credential (its account lists
        # the addresses of the agents it sends for): $ENVELOPAY_GARDEN_SECRET, user
        # $ENVELOPAY_GARDEN_USER (default "enforcer").
        secret = env.get("ENVELOPAY_GARDEN_SECRET")
        auth = (env.get("ENVELOPAY_GARDEN_USER") or "enforcer", secret) if secret else None

        endpoint = parse_endpoint(garden)
        if isinstance(endpoint, tuple):  # --garden is a port or a path (help: _GARDEN)
            endpoint = Path(garden)
        return GardenTransport(endpoint, auth=auth, reuse=False)  # a connection per message

    password = env.get("ENVELOPAY_SMTP_PASSWORD") if smtp_user else None
    if smtp_user and password is None:
        raise ConfigError("--smtp-user needs $ENVELOPAY_SMTP_PASSWORD")
    assert smtp_host is not None
    if smtp_security not in ("starttls", "tls", "none"):
        raise ConfigError("--smtp-security must be starttls, tls or none")
    return SmtpTransport(SmtpConfig(
        smtp_host, smtp_port, security=cast(Security, smtp_security), username=smtp_user, password=password,
    ))


def prepare(
    *,
    db: str,
    token_file: Path,
    garden: str | None,
    smtp_host: str | None,
    smtp_port: int,
    smtp_security: str,
    smtp_user: str | None,
    dkim_key: Path | None,
    dkim_selector: str,
    dkim_domain: str | None,
    token_created: Callable[[Path], None] = lambda _: None,
    env: Mapping[str, str] = os.environ,
) -> Launch:
    """Check the options and read the files, in the order the CLI has always done it."""
    transport = _transport(garden, smtp_host, smtp_port, smtp_security, smtp_user, env)
    signer = None
    if dkim_key is not None:
        from envelopay.dkim import DkimKey, dkim_signer  # lazy: keeps cryptography off this module's import

        if not dkim_domain:
            raise ConfigError("--dkim-key needs --dkim-domain")
        key = DkimKey.from_pem(dkim_key.read_bytes())
        signer = dkim_signer(key, selector=dkim_selector, domain=dkim_domain)
    store = open_store(db)
    return Launch(store, transport, signer, _token_or_new(token_file, env, token_created))


async def serve(
    launch: Launch,
    *,
    host: str,
    port: int,
    socket: Path | None,
    listening: Callable[[str], None] = lambda _: None,
    spend: SpendLaunch | None = None,
    finish_every: float = 5.0,
    console_port: int | None = None,
    stopped: Callable[[str], None] = lambda _: None,
) -> None:
    """Serve the enforcer until SIGINT or SIGTERM, then close the server, the SMTP link
    and the store, and tell `stopped` the summary of what it answered. With the spend
    enforcer, in-flight payments are finished every `finish_every` seconds meanwhile
    (spend/finisher.py)."""
    # lazy: keeps aiohttp, cryptography, prometheus_client off this module's import
    from envelopay.enforcer.service.server import METRICS, listen_tcp, start_server

    store, transport = launch.store, launch.transport
    await store.open()
    enforcer = Enforcer(
        store, transport, operator_token_hash=hash_token(launch.operator), signer=launch.signer
    )
    payments = None
    if spend is not None:  # the spend enforcer (spend_launch): recovers before serving

        payments = await start_payments(spend, enforcer)
    runner, where = await start_server(
        enforcer, host=host, port=port, path=str(socket) if socket else None, payments=payments
    )
    if console_port is not None and socket is not None:  # a browser needs TCP: the console too
        where = f"{where}; console at {await listen_tcp(runner, host, console_port)}/console"
    listening(where)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    finishing = None
    if payments is not None:  # unconfirmed payments and undelivered PAYs, every few seconds
        # lazy: keeps cryptography off this module's import
        from envelopay.enforcer.spend.finisher import Finisher

        finishing = asyncio.create_task(Finisher(payments, interval=finish_every).serve(stop))
    try:
        await stop.wait()
    finally:
        if finishing is not None:
            # It ends at its next wait; a pass still under way after 5 s is cancelled, which
            # is a crash of that pass: recovery at the next start finishes its intents.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(finishing, 5.0)
        summary = runner.app[METRICS].summary()
        await runner.cleanup()
        await transport.close()
        await store.close()
        stopped(summary)
