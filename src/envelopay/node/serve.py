"""`envelopay worker serve`: run a worker (and its responders) until interrupted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from envelopay.config import WorkerConfig
from envelopay.endpoints.responders import Responder
from envelopay.ledger.store import RefundLine
from envelopay.mail.garden import GardenServer
from envelopay.mail.garden_auth import AccountsFile, new_account
from envelopay.mail.maildir import mailbox_path
from envelopay.mail.transport import Transport
from envelopay.mail.transport.garden import GardenTransport
from envelopay.node.agent_node import (
    AgentNode,
    build_node,
    config_signer,
    garden_endpoint_file,
    garden_transport,
    imap_config,
)
from envelopay.node.jobs import job_runner
from envelopay.node.runtime import MAIL_CONCURRENCY, serve_responders
from envelopay.node.serve_log import LogFormat, ServeLog
from envelopay.rails.amounts import asset_decimals

__all__ = ["serve_worker"]

_log = logging.getLogger(__name__)


async def serve_worker(
    cfg: WorkerConfig,
    *,
    embedded_garden: bool = False,
    echo: Callable[[str], Any] = print,
    stop: asyncio.Event | None = None,
    ready: Callable[[Any], None] | None = None,
    retry_interval: float = 5.0,
    log: Callable[[str], Any] | None = None,
    log_format: LogFormat = "text",
    metrics_at: tuple[str, int] | None = None,
    metrics_ready: Callable[[str], None] | None = None,
    console_at: tuple[str, int] | None = None,
    console_ready: Callable[[str], None] | None = None,
    mail_concurrency: int = MAIL_CONCURRENCY,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM when no event is given).

    With `log`, one line per message handled goes there, and the summary at stop (also
    when a serving loop died). With `metrics_at` (host, port), GET /metrics answers
    there; `metrics_ready` is told its URL before `ready` is called. With `console_at`,
    the worker's console (node/console.py) answers there; `console_ready` is told its URL
    (else `echo` says it). The Maildir serves up to `mail_concurrency` messages at once
    (node/runtime.py `pump`)."""
    stop = stop or _signal_stop()
    responders = [Responder.from_config(r) for r in cfg.responders]
    garden, recorded, transport = await _start_garden(cfg, responders, echo) if embedded_garden \
        else (None, None, None)
    node = build_node(cfg, transport=transport)
    serve_log = None
    if log is not None:
        serve_log = ServeLog(log, log_format, asset_decimals(node.rails))
        node.watch(serve_log)
    runners = await _start_pages(node, garden, recorded, echo, metrics=(metrics_at, metrics_ready),
                                 console=(console_at, console_ready))
    tasks = _serving_tasks(node, cfg, responders, transport, stop, echo=echo, retry_interval=retry_interval,
                           mail_concurrency=mail_concurrency)
    echo(
        f"{cfg.agent.address} serving {len(cfg.tasks)} task(s), {len(responders)} responder(s); "
        f"ledger {cfg.agent.ledger}"
    )
    if ready is not None:
        ready(garden)
    died: list[asyncio.Task[Any]] = []
    try:
        died = await _until_stop_or_death(stop, tasks)
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for page in runners:
            await page.cleanup()
        refunded = _refunded_since(node, serve_log.started) if serve_log is not None else []
        await _abandon(node, garden, recorded)
        if serve_log is not None and log is not None:
            log(serve_log.summary(refunded))
    if died:
        # A loop that ends on its own is a bug; never serve on silently without it.
        # The process exits non-zero, so a supervisor restarts it.
        raise RuntimeError(f"{cfg.agent.address}: {len(died)} serving loop(s) died; stopped")


async def _start_garden(
    cfg: WorkerConfig, responders: list[Responder], echo: Callable[[str], Any]
) -> tuple[GardenServer, Path | None, Transport]:
    """The embedded garden (worker serve --garden): started, its endpoint recorded for
    the config's other commands, and the transport that delivers into it."""
    root = cfg.path(cfg.transport.garden_root)
    addresses = {cfg.agent.address, *(r.address for r in responders), *cfg.transport.garden_addresses}
    sock = cfg.path(cfg.transport.garden_socket) if cfg.transport.garden_socket else None
    known, own = _garden_accounts(cfg, [r.address for r in responders], echo)
    garden = GardenServer(root, sorted(addresses), unix_path=sock, port=cfg.transport.lmtp_port or 0,
                          accounts=known.accounts() if known is not None else None,
                          open_garden=known is None, refresh=known)
    if known is not None:
        known.garden = garden
    await garden.start()
    transport = GardenTransport(garden.endpoint, auth=own)
    recorded = _record_garden(cfg, garden.endpoint)
    echo(f"garden listening at {garden.endpoint} for {', '.join(sorted(addresses))}")
    return garden, recorded, transport


_Page = tuple[tuple[str, int] | None, Callable[[str], None] | None]  # (host, port) and who is told the URL


async def _start_pages(
    node: AgentNode, garden: GardenServer | None, recorded: Path | None, echo: Callable[[str], Any], *,
    metrics: _Page, console: _Page,
) -> list[Any]:
    """The Prometheus endpoint and the worker's console, when asked for; a page that
    cannot start closes what was opened before it and raises."""
    runners: list[Any] = []
    (metrics_at, metrics_ready), (console_at, console_ready) = metrics, console
    if metrics_at is not None:
        url = await _start_page(_start_metrics, node, metrics_at, runners, garden, recorded)
        echo(f"metrics at {url}")
        if metrics_ready is not None:
            metrics_ready(url)
    if console_at is not None:
        url = await _start_page(_start_console, node, console_at, runners, garden, recorded)
        (console_ready or (lambda where: echo(f"console at {where}")))(url)
    return runners


async def _start_page(
    start: Callable[[AgentNode, tuple[str, int]], Awaitable[tuple[Any, str]]], node: AgentNode,
    at: tuple[str, int], runners: list[Any], garden: GardenServer | None, recorded: Path | None,
) -> str:
    try:
        page, url = await start(node, at)
    except BaseException:
        for opened in runners:
            await opened.cleanup()
        await _abandon(node, garden, recorded)
        raise
    runners.append(page)
    return url


def _serving_tasks(
    node: AgentNode, cfg: WorkerConfig, responders: list[Responder], transport: Transport | None,
    stop: asyncio.Event, *, echo: Callable[[str], Any], retry_interval: float, mail_concurrency: int,
) -> list[asyncio.Task[Any]]:
    """The loops a worker runs: its inbound transport, its responders (in the garden),
    the outbox's retries and the job runner."""
    if cfg.transport.kind == "smtp":
        tasks = [asyncio.create_task(node.serve_imap(imap_config(cfg), stop))]
    elif cfg.transport.kind == "agentmail":
        # lazy: keeps aiohttp, httpx off this module's import
        from envelopay.node.agentmail import serve_agentmail

        tasks = [asyncio.create_task(serve_agentmail(node, cfg, stop, echo=echo))]
    else:
        tasks = [asyncio.create_task(node.serve(stop, concurrency=mail_concurrency))]
    if responders and cfg.transport.kind == "garden":
        root = cfg.path(cfg.transport.garden_root)
        mapping = {mailbox_path(root, r.address): r for r in responders}
        # Responders answer inside the garden, even when the worker sends through the enforcer.
        rt = node.transport or transport or garden_transport(cfg)
        tasks.append(asyncio.create_task(serve_responders(mapping, rt, domain=cfg.agent.domain, stop=stop,
                                                          sign=config_signer(cfg))))
    tasks.append(asyncio.create_task(_retry_loop(node.drain, stop, retry_interval)))
    runner = job_runner(node, cfg)
    if runner is not None:  # every ORDER is a job: the mailbox never waits for a handler
        tasks.append(asyncio.create_task(runner.run(stop)))
    return tasks


def _refunded_since(node: AgentNode, since: datetime) -> list[RefundLine]:
    """The refunds this worker paid while it served (the summary says what went back, so
    money refunded does not read as income); nothing when the ledger cannot say."""
    try:
        return node.store.refunds_paid_since(node.address, since)
    except Exception:  # a ledger gone at stop (say, PostgreSQL down): the summary, not the stop, goes without
        return []


async def _abandon(node: AgentNode, garden: GardenServer | None, recorded: Path | None) -> None:
    """Close what a start that failed had opened."""
    await node.close()
    node.store.close()
    if garden is not None:
        await garden.stop()
    _forget_garden(recorded)


async def _start_console(node: AgentNode, where: tuple[str, int]) -> tuple[Any, str]:
    # lazy: keeps aiohttp, jinja2 off this module's import
    from envelopay.ledger.summaries import Summaries
    from envelopay.node.console import Console, start_console

    if not isinstance(node.store, Summaries):
        raise TypeError(f"the console reads a SQL ledger, not {type(node.store).__name__}")
    console = Console(node.store, node.address, asset_decimals(node.rails))
    return await start_console(console, *where)


def _record_garden(cfg: WorkerConfig, endpoint: tuple[str, int] | Path) -> Path | None:
    """Write where the in-process garden listens when the config does not say (a plain
    `init`'s), so `call` and the client commands of a config sharing its root reach it."""
    if cfg.transport.garden_socket or cfg.transport.lmtp_port is not None or isinstance(endpoint, Path):
        return None
    where = garden_endpoint_file(cfg)
    host, port = endpoint
    tmp = where.with_name(f".{where.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"host": host, "port": port, "pid": os.getpid()}) + "\n")
    os.replace(tmp, where)  # whole or not at all: a reader never sees half an address
    return where


def _forget_garden(where: Path | None) -> None:
    """A stopped worker leaves no address behind, unless another worker has since written its own."""
    if where is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if json.loads(where.read_text()).get("pid") == os.getpid():
            where.unlink()


async def _until_stop_or_death(
    stop: asyncio.Event, tasks: list[asyncio.Task[Any]]
) -> list[asyncio.Task[Any]]:
    """Wait for `stop`; if a serving task ends first, log why and return the dead ones."""
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([stopper, *tasks], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    if stop.is_set():
        return []
    died = [t for t in tasks if t.done()]
    for t in died:
        exc = None if t.cancelled() else t.exception()
        _log.error("serving loop %s ended while serving", t.get_coro(), exc_info=exc)
    return died


async def _start_metrics(node: AgentNode, where: tuple[str, int]) -> tuple[Any, str]:
    # lazy: keeps aiohttp, prometheus_client off this module's import
    from envelopay.node.metrics import WorkerMetrics, start_metrics

    metrics = WorkerMetrics(node.store, node.address)
    node.watch(metrics)
    return await start_metrics(metrics, *where)


def _garden_accounts(
    cfg: WorkerConfig, responder_addresses: list[str], echo: Callable[[str], Any]
) -> tuple[AccountsFile | None, tuple[str, str] | None]:
    """The embedded garden's accounts and this process's own credential.

    The garden authenticates every sender: the accounts file's (`init` puts this agent's
    own account there; other agents and the enforcer are added with `envelopay garden
    account`, also while the garden runs), plus one made here, in memory, for this
    worker and its responders (user `node.<address>`). `garden_open = true` is the
    legacy open garden, said out loud."""
    if cfg.transport.garden_open:
        echo("WARNING: garden_open = true: this garden is OPEN, any local process may send "
             "From any of its addresses (SPEC.md, Walled garden)")
        return None, None
    path = cfg.path(cfg.transport.garden_accounts) if cfg.transport.garden_accounts else None
    if path is not None and not path.exists():
        echo(f"garden: no accounts file at {path} yet: only this worker may send")
    account, secret = new_account(f"node.{cfg.agent.address}", [cfg.agent.address, *responder_addresses])
    return AccountsFile(path, (account,)), (account.user, secret)


async def _retry_loop(drain: Callable[[], Any], stop: asyncio.Event, interval: float) -> None:
    """Outbox rows whose send failed come due again later; drain them on a timer."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval)
        if not stop.is_set():
            await drain()


def _signal_stop() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(RuntimeError, ValueError):  # not the main thread: no signals
            loop.add_signal_handler(sig, stop.set)
    return stop
