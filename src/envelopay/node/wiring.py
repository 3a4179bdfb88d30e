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
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from envelopay import dkim
from envelopay.config import WorkerConfig
from envelopay.devnet.registry import devnet_dns
from envelopay.devnet.state import devnet_home as home_of
from envelopay.dkim import DkimResult, DkimSigner, DnsLookup, dkim_signer
from envelopay.endpoints.calls import LedgerCalls, settle_reply
from envelopay.engine import Application, Engine, Outcome, Sent
from envelopay.engine.outbox import DirectHook, DrainReport, EnforcerHook, OutboxDrainer, SendHook
from envelopay.errors import ConfigError
from envelopay.ledger.evidence import EvidenceLog
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import AnswerLimits, Store
from envelopay.mail.garden_auth import read_secret
from envelopay.mail.imap import ImapConfig, ImapMessage, ImapSource
from envelopay.mail.maildir import mailbox_path
from envelopay.mail.transport import Transport
from envelopay.mail.transport.garden import GardenPool, GardenTransport
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay.node.deferrals import serve_deferrals
from envelopay.node.evidence_tap import keep_evidence, keep_received
from envelopay.node.observe import CURRENT, Observer, Seen, tap_parser, timed_rail
from envelopay.node.runtime import pump
from envelopay.protocol.messages import Message
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.rails.finality import WaitPolicy
from envelopay.rails.interface import Rail
from envelopay.rails.registry import judge_terms, load_rails
from envelopay.worker.app import WorkerApp, WorkerApplication
from envelopay.worker.counterpay import CounterPayments
from envelopay.worker.refunds import Refunder, refunder_for

__all__ = ["AgentNode", "build_node", "open_store"]

Clock = Callable[[], datetime]
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
    deferral_hints: list[datetime] = field(default_factory=list)
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
                self._drain_behind()
            else:
                await self.drainer.drain()
        if outcome.status == "waiting" and outcome.retry_at is not None:
            heapq.heappush(self.deferral_hints, outcome.retry_at)
        if outcome.message_id is not None and outcome.status not in ("busy", "deferred", "waiting"):
            self._seen[outcome.message_id] = outcome
            if len(self._seen) > RECENT:
                del self._seen[next(iter(self._seen))]  # the oldest
            fut = self._waiters.pop(outcome.message_id, None)
            if fut is not None and not fut.done():
                fut.set_result(outcome)
        return outcome

    def watch(self, observer: Observer) -> None:
        """Tell `observer` of every message this node handles from now on. The first
        watcher taps the engine's parser and times its rails (node/observe.py); a node
        nobody watches pays nothing for it."""
        if not self.observers:
            self.engine.parser = tap_parser(self.engine.parser)
            self.engine.rails = {chain: timed_rail(rail) for chain, rail in self.engine.rails.items()}
        self.observers.append(observer)

    async def _observed(self, raw: bytes) -> Outcome:
        seen = Seen()
        token = CURRENT.set(seen)
        try:
            started = time.perf_counter()
            result = await self.verify_dkim(raw)
            dkim_seconds = time.perf_counter() - started if self.dns is not None else None
            outcome = await self.engine.handle(raw, dkim=result)
            seconds = time.perf_counter() - started
        finally:
            CURRENT.reset(token)
        handled = seen.handled(outcome, datetime.now(UTC), seconds, dkim_seconds)
        for observer in self.observers:
            try:
                observer(handled)
            except Exception:  # a log or metric must never cost a message its handling
                _log.exception("%s: an observer failed", self.address)
        return outcome

    def _drain_behind(self) -> None:
        # A drain already running picks the new rows up (drain() tells it to look again).
        task = asyncio.get_running_loop().create_task(self._drain_logged())
        self._draining.add(task)
        task.add_done_callback(self._draining.discard)

    async def _drain_logged(self) -> None:
        try:
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
        sent = await self.engine.send(message, to, **kw)
        await self.drainer.drain()
        return sent

    async def drain(self) -> DrainReport:
        return await self.drainer.drain()

    async def serve(self, stop: asyncio.Event) -> None:
        """Handle every message landing in this agent's Maildir until `stop` is set."""
        if self.maildir is None:
            raise ConfigError(f"{self.address}: no Maildir to serve")

        async def consume(_: Path, raw: bytes) -> bool:
            # busy/deferred: try again shortly (another worker's lease, a DNS hiccup);
            # still not handled: leave it in new/ (handled again at the next start).
            # waiting: in the ledger now; serve_deferrals hands it back.
            for delay in self.retry_delays:
                if delay:
                    await asyncio.sleep(delay)
                outcome = await self.receive(raw, drain_behind=True)
                if outcome.status not in ("busy", "deferred"):
                    return True
            return False

        waiting = asyncio.create_task(serve_deferrals(self, stop))
        try:
            await pump([self.maildir], consume, stop=stop)
        finally:
            await _end_beside(waiting, stop)
            await self.settle()

    async def serve_imap(self, config: Any, stop: asyncio.Event) -> None:
        """Handle every message of an IMAP mailbox (IDLE); a message is flagged processed
        only after its step committed (busy/deferred: left for the next pass)."""
        async def consume(msg: ImapMessage) -> bool:
            outcome = await self.receive(msg.raw)
            return outcome.status not in ("busy", "deferred")

        waiting = asyncio.create_task(serve_deferrals(self, stop))
        try:
            await ImapSource(config).run(consume, stop)
        finally:
            await _end_beside(waiting, stop)

    async def close(self) -> None:
        if self.transport is not None:
            await self.transport.close()
        for thing in self.closers:
            await thing.aclose()
        for rail in self.rails.values():
            closer = getattr(rail, "aclose", None)
            if closer is not None:
                await closer()


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


def dns_for(cfg: WorkerConfig) -> DnsLookup:
    home = cfg.path(cfg.agent.devnet_home) if cfg.agent.devnet_home else None
    return dns_setup(cfg.agent.dkim_dns, dict(cfg.dkim_records), devnet_home=home)


def dns_setup(kind: str, table: Mapping[str, str], *, devnet_home: Path | None = None) -> DnsLookup:
    """The DKIM key lookup every verifier on this machine uses — the node's inbound path
    and the spend enforcer's INVOICE check alike: "resolver" (DNS), "table" (the given
    records), or "devnet" (those, then every agent registered with the devnet)."""
    if kind == "resolver":
        return dkim.resolver_dns()
    fixed = dkim.table_dns(dict(table))
    if kind != "devnet":
        return fixed

    registered = devnet_dns(home_of(devnet_home))

    async def lookup(name: str) -> str | None:
        return await fixed(name) or await registered(name)

    return lookup


def wait_policy(cfg: WorkerConfig) -> WaitPolicy:
    try:
        return WaitPolicy.from_options(cfg.wait)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config field wait: {exc}") from exc


def answer_limits(cfg: WorkerConfig) -> AnswerLimits:
    """The `[answers]` section as the ledger counts it."""
    a = cfg.answers
    return AnswerLimits(per_peer=a.per_peer, per_thread=a.per_thread, window=timedelta(seconds=a.window),
                        help=a.help)


def _judge_accepted(cfg: WorkerConfig, rails: Mapping[str, Rail]) -> None:
    """Every [[accept]] rail (what METHODS offers, where INVOICEs ask to be paid) is one
    our rails can verify: a served chain, a known asset, a wallet spelled for its chain."""
    for i, acc in enumerate(cfg.accept):
        problem = judge_terms(rails, acc.chain, acc.token, wallet=acc.wallet)
        if problem is not None:
            raise ConfigError(f"config field accept.{i}.{problem.part}: {problem.detail}")


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
        rails = load_rails({name: _rail_options(cfg, opts) for name, opts in cfg.rails.items()})
        _judge_accepted(cfg, rails)
    if app is None:
        kw: dict[str, Any] = {"rails": rails, "clock": clock, "counterpayments": CounterPayments(
            counterpay_path(cfg))}
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


def worker_refunder(
    cfg: WorkerConfig, store: Store, rails: Mapping[str, Rail], counter_payer: Any, clock: Clock
) -> Refunder | None:
    """Refunds from the rail keys of `[rails.NAME] keypair`, or through the enforcer."""
    keys = {n: cfg.path(k) if isinstance(k, str) else k for n, o in cfg.rails.items()
            if isinstance(k := o.get("keypair"), str | bytes)}
    try:
        return refunder_for(store, rails=rails, keys=keys, counter_payer=counter_payer,
                            owner=cfg.agent.worker_id or cfg.agent.address, clock=clock)
    except ConfigError:  # a ledger of another kind keeps no refunds: the money stays, as before
        return None


def counterpay_path(cfg: WorkerConfig) -> Path:
    """Beside a SQLite ledger (`x.db` → `x.offers.db`); for PostgreSQL under var/."""
    ledger = cfg.agent.ledger
    if ledger.startswith(("postgresql://", "postgres://")):
        path = cfg.path("var") / "offers.db"
    else:
        path = cfg.path(ledger.removeprefix("sqlite:///")).with_suffix(".offers.db")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class _Closing:
    """Adapts a plain close() to the aclose() the node calls on shutdown."""

    close: Callable[[], None]

    async def aclose(self) -> None:
        self.close()


def _enforcer_where(cfg: WorkerConfig) -> tuple[str, str]:
    token = os.environ.get(cfg.transport.enforcer_token_env)
    if not cfg.transport.enforcer:
        raise ConfigError("transport.payments = \"enforcer\" needs transport.enforcer")
    if not token:
        raise ConfigError(f"transport.enforcer is set but ${cfg.transport.enforcer_token_env} holds no token")
    where = cfg.transport.enforcer
    return (where if where.startswith(("http://", "https://")) else str(cfg.path(where))), token


def enforced_payer(cfg: WorkerConfig) -> Any:
    """The OFFER counter-legs paid by the spend enforcer (same URL and token as the mail)."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.client.enforced_payer import EnforcedPayer

    where, token = _enforcer_where(cfg)
    return EnforcedPayer(where, token)


def enforcer_hook(cfg: WorkerConfig) -> EnforcerHook:
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.client.http_client import EnforcerClient

    token = os.environ.get(cfg.transport.enforcer_token_env)
    if not token:
        raise ConfigError(f"transport.enforcer is set but ${cfg.transport.enforcer_token_env} holds no token")
    assert cfg.transport.enforcer is not None
    where = cfg.transport.enforcer
    if not where.startswith(("http://", "https://")):
        where = str(cfg.path(where))
    return EnforcerHook(EnforcerClient(where, token))


def _secret(env: str | None, what: str) -> str | None:
    if env is None:
        return None
    value = os.environ.get(env)
    if not value:
        raise ConfigError(f"{what}: ${env} is not set")
    return value


def smtp_transport(cfg: WorkerConfig) -> Transport:
    t = cfg.transport
    if not t.smtp_host:
        raise ConfigError("transport.smtp_host: required when transport.kind is 'smtp'")
    # No pool: each message on a fresh connection with send_raw's retries (the outbox
    # drainer retries a row itself, with its backoff).
    return SmtpTransport(SmtpConfig(
        t.smtp_host, t.smtp_port, security=t.smtp_security, username=t.smtp_username,
        password=_secret(t.smtp_password_env, "transport.smtp_password_env"),
    ), pool_size=0)


def imap_config(cfg: WorkerConfig) -> Any:
    t = cfg.transport
    if not t.imap_host or not t.imap_user:
        raise ConfigError("transport.imap_host and imap_user: required when transport.kind is 'smtp'")
    password = _secret(t.imap_password_env, "transport.imap_password_env") or ""
    return ImapConfig(t.imap_host, t.imap_port, t.imap_user, password, mailbox=t.imap_mailbox, tls=t.imap_tls)


def garden_transport(cfg: WorkerConfig, connections: int = 4) -> GardenPool:
    t = cfg.transport
    if t.kind != "garden":
        raise ConfigError("transport.kind: this needs the garden (kind = 'garden')")
    endpoint: tuple[str, int] | Path
    if t.garden_socket:
        endpoint = cfg.path(t.garden_socket)
    elif t.lmtp_port is not None:
        endpoint = (t.lmtp_host, t.lmtp_port)
    else:
        endpoint = served_garden(cfg)
    auth = garden_credential(cfg)
    return GardenPool([GardenTransport(endpoint, auth=auth) for _ in range(connections)])


def config_signer(
    cfg: WorkerConfig, clock: Clock = lambda: datetime.now(UTC)
) -> DkimSigner | None:
    """The DKIM signer every path that sends this agent's mail uses (the engine's outbox,
    `call`, the responders, `mail reply`) when the config names a `dkim_key`; None without
    one. AgentMail composes and signs what it sends: a signature of ours would not be sent."""
    if not cfg.agent.dkim_key or cfg.transport.kind == "agentmail":
        return None
    key_pem = cfg.path(cfg.agent.dkim_key).read_bytes()
    return dkim_signer(key_pem, selector=cfg.agent.dkim_selector, domain=cfg.agent.domain, clock=clock)


def garden_endpoint_file(cfg: WorkerConfig) -> Path:
    """Where `worker serve --garden` writes the loopback address of the garden it runs when
    the config names neither garden_socket nor lmtp_port: beside the garden root, so every
    config sharing that garden (a plain `init`'s included) finds it."""
    root = cfg.path(cfg.transport.garden_root)
    return root.parent / f"{root.name}.endpoint"


def served_garden(cfg: WorkerConfig) -> tuple[str, int]:
    """The (host, port) a running `worker serve --garden` recorded; a ConfigError (exit 3)
    that says how to get one when none is running."""
    where = garden_endpoint_file(cfg)
    try:
        doc = json.loads(where.read_text())
        return str(doc["host"]), int(doc["port"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"transport: no garden to reach — set garden_socket or lmtp_port, or run `envelopay worker "
            f"serve --garden` with this config (it records where its garden listens in {where})"
        ) from exc


def garden_credential(cfg: WorkerConfig) -> tuple[str, str] | None:
    """(agent address, secret) from `transport.garden_secret_file` (what `init` writes)
    or the env var `transport.garden_secret_env` names; None when neither is set (a
    garden that authenticates then answers 530)."""
    t = cfg.transport
    if t.garden_secret_file:
        return cfg.agent.address, read_secret(cfg.path(t.garden_secret_file))
    if not t.garden_secret_env:
        return None
    secret = _secret(t.garden_secret_env, "transport.garden_secret_env")
    assert secret is not None  # _secret raises when the variable is unset or empty
    return cfg.agent.address, secret


def _rail_options(cfg: WorkerConfig, opts: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(opts)
    key = out.get("keypair")
    if isinstance(key, str):
        out["keypair"] = str(cfg.path(key))
    return out


async def _end_beside(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """End the deferral loop beside a serving loop: wait for it after a clean stop, cancel
    it when the serving loop ended on its own (an error), so that error reaches serve_worker
    instead of hanging behind a loop that only stops with `stop`."""
    if not stop.is_set():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
