"""One agent, wired: engine + DKIM verification + outbox drainer + Maildir inbox.

`AgentNode.receive(raw)` is the whole inbound path for one message: DKIM verdict →
engine (parse … commit) → drain the outbox (send hook → sign → transport). `send()` is
the client role: record the message in its flow, then drain. `serve()` pumps a Maildir.
`build_node(config)` assembles all of it from a WorkerConfig.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from envelopay import dkim
from envelopay.config import WorkerConfig
from envelopay.dkim import DkimResult, DnsLookup
from envelopay.endpoints.calls import LedgerCalls, settle_reply
from envelopay.engine import Application, Engine, Outcome, Sent
from envelopay.engine.outbox import DirectHook, DrainReport, OutboxDrainer, SendHook
from envelopay.errors import ConfigError
from envelopay.ledger.evidence import EvidenceLog
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.mail.imap import ImapMessage, ImapSource
from envelopay.mail.maildir import mailbox_path
from envelopay.mail.transport import Transport
from envelopay.mail.transport.garden import GardenPool
from envelopay.node.evidence_tap import keep_evidence, keep_received
from envelopay.node.from_config import (
    Clock,
    answer_limits,
    config_signer,
    counterpayment_book,
    dns_for,
    dns_setup,
    enforced_payer,
    enforcer_hook,
    garden_credential,
    garden_endpoint_file,
    garden_transport,
    imap_config,
    judge_accepted,
    rail_options,
    served_garden,
    smtp_transport,
    wait_policy,
    worker_refunder,
)
from envelopay.node.observe import Observer, handled
from envelopay.node.runtime import MAIL_CONCURRENCY, pump
from envelopay.node.waiting import serve_waiting
from envelopay.protocol.messages import Message
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.rails.interface import Rail
from envelopay.rails.registry import load_rails
from envelopay.worker.app import WorkerApp, WorkerApplication

# The parts a config names are made in node/from_config.py; those other rooms import
# from the node's one door are named here too.
__all__ = [
    "AgentNode",
    "answer_limits",
    "build_node",
    "config_signer",
    "dns_setup",
    "garden_credential",
    "garden_endpoint_file",
    "garden_transport",
    "imap_config",
    "open_store",
    "served_garden",
    "smtp_transport",
]

RECENT = 10_000
_log = logging.getLogger(__name__)


def _may_answer_a_call(raw: bytes) -> bool:
    """A cheap look before the ledger is asked: a call's answer names it in In-Reply-To."""
    head = raw[: raw.find(b"\r\n\r\n") if b"\r\n\r\n" in raw else 65536].lower()
    return b"in-reply-to:" in head


@dataclass
class AgentNode:
    engine: Engine
    drainer: OutboxDrainer
    dns: DnsLookup | None
    maildir: Path | None = None
    transport: Transport | None = None
    rails: Mapping[str, Rail] = field(default_factory=dict)
    # Recent outcomes only (a long-running worker must not grow without bound).
    outcomes: deque[Outcome] = field(default_factory=lambda: deque(maxlen=RECENT))
    received: int = 0  # outcomes recorded since start (a cursor for followers)
    retry_delays: tuple[float, ...] = (0.0, 0.2, 1.0, 5.0)  # for busy/deferred messages
    closers: list[Any] = field(default_factory=list)  # things with aclose() (an enforcer client)
    _waiters: dict[str, asyncio.Future[Outcome]] = field(default_factory=dict)
    _seen: dict[str, Outcome] = field(default_factory=dict)
    _draining: set[asyncio.Task[Any]] = field(default_factory=set)
    # Every look again this node asked for (a min-heap): the wait loop wakes at the earliest,
    # and a later one is not forgotten when an earlier one is served.
    waiting_hints: list[datetime] = field(default_factory=list)
    # Told of every message handled (`watch`): the serve log and the metrics of worker serve.
    observers: list[Observer] = field(default_factory=list)
    # Where received mail is kept byte for byte (node/evidence_tap.py); None: not kept.
    evidence: EvidenceLog | None = None

    @property
    def address(self) -> str:
        return self.engine.address

    @property
    def store(self) -> Store:
        return self.engine.store

    async def verify_dkim(self, raw: bytes) -> DkimResult | None:
        if self.dns is None:
            return None

        return await dkim.verify(raw, dns=self.dns)

    async def receive(self, raw: bytes, *, drain_behind: bool = False) -> Outcome:
        """Handle one inbound message. Its replies are committed to the outbox with the
        step; they are sent before this returns, or, with `drain_behind` (the Maildir
        pump), by a drain running beside the next messages: the reply's delivery (an
        SMTP/LMTP round trip, the receiving MTA's fsync) then no longer holds up the
        handling of the next message. Either way a reply not yet sent is a pending
        outbox row, sent by the next drain, after a restart too."""
        if _may_answer_a_call(raw) and settle_reply(LedgerCalls(self.store, local=self.address), raw):
            # The answer to a call this address made (`envelopay call` from the served
            # config): settled in the ledger, where the caller's wait reads it; it is not
            # mail for the engine (which would record it as a Re: that is not protocol).
            outcome = Outcome("ignored", detail="the reply to a call of ours: settled")
        elif self.observers:
            outcome = await self._observed(raw)
        else:
            outcome = await self.engine.handle(raw, dkim=await self.verify_dkim(raw))
        if self.evidence is not None:
            keep_received(self.evidence, self.address, raw, outcome, datetime.now(UTC))
        self.outcomes.append(outcome)
        self.received += 1
        if outcome.outbox:  # only a step that wrote replies has anything to send now
            if drain_behind:
                self._drain_behind(outcome.outbox)
            else:
                await self.drainer.drain()
        if outcome.status == "waiting" and outcome.retry_at is not None:
            heapq.heappush(self.waiting_hints, outcome.retry_at)
        if outcome.message_id is not None and outcome.status not in ("busy", "deferred", "waiting"):
            self._seen[outcome.message_id] = outcome
            if len(self._seen) > RECENT:
                del self._seen[next(iter(self._seen))]  # the oldest
            fut = self._waiters.pop(outcome.message_id, None)
            if fut is not None and not fut.done():
                fut.set_result(outcome)
        return outcome

    def watch(self, observer: Observer) -> None:
        """Tell `observer` of every message this node handles from now on (node/observe.py);
        a node nobody watches builds no Handled."""
        self.observers.append(observer)

    async def _observed(self, raw: bytes) -> Outcome:
        # The parse and the rail timings come back from the engine as values (no context
        # variable), so concurrent receives cannot mix their facts.
        started = time.perf_counter()
        result = await self.verify_dkim(raw)
        dkim_seconds = time.perf_counter() - started if self.dns is not None else None
        parsed, outcome = await self.engine.handle_read(raw, dkim=result)
        seconds = time.perf_counter() - started
        seen = handled(parsed, outcome, datetime.now(UTC), seconds, dkim_seconds)
        for observer in self.observers:
            try:
                observer(seen)
            except Exception:  # a log or metric must never cost a message its handling
                _log.exception("%s: an observer failed", self.address)
        return outcome

    def _drain_behind(self, own: Sequence[str] = ()) -> None:
        # The message's own rows go first, beside any drain in progress (not behind the
        # batch it is sending); then a drain for the rest (one already running picks new
        # rows up: drain() tells it to look again).
        task = asyncio.get_running_loop().create_task(self._drain_logged(own))
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain_logged(self, own: Sequence[str] = ()) -> None:
        try:
            if own:
                await self.drainer.send_now(own)
            await self.drainer.drain()
        except Exception:  # the rows stay pending: the next drain tries them again
            _log.exception("%s: outbox drain failed", self.address)

    async def settle(self) -> None:
        """Wait for the drains started behind the pump."""
        while self._draining:
            await asyncio.gather(*list(self._draining), return_exceptions=True)

    def outcomes_since(self, cursor: int) -> list[Outcome]:
        """Outcomes recorded after `cursor` (a past value of `received`), oldest first."""
        n = min(self.received - cursor, len(self.outcomes))
        return list(self.outcomes)[len(self.outcomes) - n:] if n > 0 else []

    async def wait_outcome(self, message_id: str, timeout: float = 30.0) -> Outcome:
        """The outcome of the inbound message `message_id`, once this node handled it."""
        if message_id in self._seen:
            return self._seen[message_id]
        fut = self._waiters.setdefault(message_id, asyncio.get_running_loop().create_future())
        return await asyncio.wait_for(asyncio.shield(fut), timeout)

    async def send(self, message: Message, to: str, **kw: Any) -> Sent:
        """Record `message` in its flow and send it before returning: its own row goes
        out at once (not behind the batch a drain is sending), the other due rows by a
        drain behind it. A row that cannot go at once (an earlier row of its flow still
        pending, another drainer's claim) is drained here, as before."""
        sent = await self.engine.send(message, to, **kw)
        if (await self.drainer.send_now([sent.message_id])).count:
            self._drain_behind()
        else:
            await self.drainer.drain()
        return sent

    async def drain(self) -> DrainReport:
        return await self.drainer.drain()

    async def serve(self, stop: asyncio.Event, *, concurrency: int = MAIL_CONCURRENCY) -> None:
        """Handle every message landing in this agent's Maildir until `stop` is set, up to
        `concurrency` at once (one thread's in turn: node/runtime.py `pump`)."""
        if self.maildir is None:
            raise ConfigError(f"{self.address}: no Maildir to serve")
        await self.warm()

        async def consume(_: Path, raw: bytes) -> bool:
            # busy/deferred: try again shortly (another worker's lease, a DNS hiccup);
            # still not handled: leave it in new/ (handled again at the next start).
            # waiting: in the ledger now; serve_waiting hands it back.
            for delay in self.retry_delays:
                if delay:
                    await asyncio.sleep(delay)
                outcome = await self.receive(raw, drain_behind=True)
                if outcome.status not in ("busy", "deferred"):
                    return True
            return False

        waiting = asyncio.create_task(serve_waiting(self, stop))
        try:
            await pump([self.maildir], consume, stop=stop, concurrency=concurrency)
        finally:
            await _end_beside(waiting, stop)
            await self.settle()

    async def serve_imap(self, config: Any, stop: asyncio.Event) -> None:
        """Handle every message of an IMAP mailbox (IDLE); a message is flagged processed
        only after its step committed (busy/deferred: left for the next pass)."""
        async def consume(msg: ImapMessage) -> bool:
            outcome = await self.receive(msg.raw)
            return outcome.status not in ("busy", "deferred")

        await self.warm()
        waiting = asyncio.create_task(serve_waiting(self, stop))
        try:
            await ImapSource(config).run(consume, stop)
        finally:
            await _end_beside(waiting, stop)

    async def warm(self) -> None:
        """Load before the first message what handling it would load on first use: the
        DKIM verifier and each rail's client (a rail with no such cost has no `warm`).
        Without this the first customer's mail stalled every message on the loop for
        ~0.3 s while modules imported (bench/RESULTS.md "jobs")."""
        dkim.load_verifier()
        for rail in self.rails.values():
            warm = getattr(rail, "warm", None)
            if warm is not None:
                await warm()

    async def close(self) -> None:
        await self.settle()  # the drains behind sends and the pump: before the transport closes
        if self.transport is not None:
            await self.transport.close()
        for thing in self.closers:
            await thing.aclose()
        for rail in self.rails.values():
            closer = getattr(rail, "aclose", None)
            if closer is not None:
                await closer()


@dataclass
class _Closing:
    """Adapts a plain close() to the aclose() the node calls on shutdown."""

    close: Callable[[], None]

    async def aclose(self) -> None:
        self.close()


def open_store(url: str, base: Path) -> Store:
    """A ledger from the config's `ledger` value: a SQLite path or a postgresql:// DSN."""
    if url.startswith(("postgresql://", "postgres://")):
        # lazy: keeps psycopg, psycopg_pool off this module's import
        from envelopay.ledger.postgres import PostgresStore

        store: Store = PostgresStore(url)
    else:
        path = Path(url.removeprefix("sqlite:///"))
        path = path if path.is_absolute() else base / path
        path.parent.mkdir(parents=True, exist_ok=True)
        store = SqliteStore(str(path))
    store.migrate()
    return store


def build_node(
    cfg: WorkerConfig,
    *,
    app: Application | None = None,
    store: Store | None = None,
    rails: Mapping[str, Rail] | None = None,
    transport: Transport | None = None,
    hook: SendHook | None = None,
    maildir: Path | None = None,
    clock: Clock = lambda: datetime.now(UTC),
    id_factory: Callable[[], str] | None = None,
) -> AgentNode:
    """Assemble an agent from its config; any part may be injected (tests, the demo)."""
    base = Path(cfg.base_dir)
    closers: list[Any] = []
    if store is None:
        store = open_store(cfg.agent.ledger, base)
    if rails is None:
        rails = load_rails({name: rail_options(cfg, opts) for name, opts in cfg.rails.items()})
        judge_accepted(cfg, rails)
    if app is None:
        kw: dict[str, Any] = {"rails": rails, "clock": clock,
                              "counterpayments": counterpayment_book(cfg, store, clock)}
        if cfg.transport.payments == "enforcer":
            kw["counter_payer"] = enforced_payer(cfg)
        app = WorkerApplication(WorkerApp(cfg, **kw))
        if isinstance(app, WorkerApplication):  # money it cannot use goes back (SPEC.md "Refunds")
            app.refunder = worker_refunder(cfg, store, rails, kw.get("counter_payer"), clock)
            app.overpay_tolerance = cfg.refunds.overpay_tolerance
        closers.append(_Closing(kw["counterpayments"].close))
    if hook is None and cfg.transport.enforcer:
        hook = enforcer_hook(cfg)
        closers.append(hook.client)
    if transport is None and hook is None:
        if cfg.transport.kind == "agentmail":
            # lazy: keeps aiohttp, httpx off this module's import
            from envelopay.node.agentmail import agentmail_transport

            transport = agentmail_transport(cfg, store, clock)
        else:
            transport = smtp_transport(cfg) if cfg.transport.kind == "smtp" else garden_transport(cfg)
    if hook is None:
        assert transport is not None
        hook = DirectHook(transport, config_signer(cfg, clock))
    engine_kw: dict[str, Any] = {}
    if id_factory is not None:
        engine_kw["id_factory"] = id_factory
    if cfg.agent.profile != "strict" or cfg.agent.extensions:
        options = ParseOptions(profile=cfg.agent.profile, extensions=frozenset(cfg.agent.extensions))
        engine_kw["parser"] = partial(parse, options=options)
    engine = Engine(
        store,
        address=cfg.agent.address,
        domain=cfg.agent.domain,
        rails=rails,
        app=app,
        dkim_policy=cfg.agent.dkim_policy,
        proof_binding=cfg.agent.proof_binding,
        clock=clock,
        worker_id=cfg.agent.worker_id,
        wait=wait_policy(cfg),
        answer_limits=answer_limits(cfg),
        **engine_kw,
    )
    # A pool of garden connections lets the drain deliver replies of several flows at
    # once (each delivery waits for the garden's fsync); other hooks get one at a time.
    parallel = transport.size if isinstance(transport, GardenPool) and isinstance(hook, DirectHook) else 1
    drainer = OutboxDrainer(store, hook, clock=clock, parallel=parallel, owner=engine.worker_id)
    if maildir is None and cfg.transport.kind == "garden":
        maildir = mailbox_path(cfg.path(cfg.transport.garden_root), cfg.agent.address)
    dns = dns_for(cfg) if cfg.agent.dkim_policy != "off" or cfg.dkim_records else None
    node = AgentNode(engine, drainer, dns, maildir, transport, rails, closers=closers)
    keep_evidence(node)  # raw mails and DKIM keys as seen, for `envelopay evidence` (issue 31)
    return node


async def _end_beside(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """End the waiting loop beside a serving loop: wait for it after a clean stop, cancel
    it when the serving loop ended on its own (an error), so that error reaches serve_worker
    instead of hanging behind a loop that only stops with `stop`."""
    if not stop.is_set():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
