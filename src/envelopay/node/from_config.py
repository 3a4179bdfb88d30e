"""What a config names, made into the parts a node is wired from: the DKIM key lookup,
the wait policy and answer limits, the rails' options, the transports (SMTP, IMAP, the
garden: its endpoint file and credential), the signer, the enforcer's hook and payer, the
refunder. Each reads the config and returns one part; `node/agent_node.py` assembles them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from envelopay import dkim
from envelopay.config import WorkerConfig
from envelopay.devnet.registry import devnet_dns
from envelopay.devnet.state import devnet_home as home_of
from envelopay.dkim import DkimSigner, DnsLookup, dkim_signer
from envelopay.engine.outbox import EnforcerHook
from envelopay.errors import ConfigError
from envelopay.ledger._sql_base import SqlBase
from envelopay.ledger.counterpay import CounterPayBook
from envelopay.ledger.store import AnswerLimits, Store
from envelopay.mail.garden_auth import read_secret
from envelopay.mail.imap import ImapConfig
from envelopay.mail.transport import Transport
from envelopay.mail.transport.garden import GardenPool, GardenTransport
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay.rails.finality import WaitPolicy
from envelopay.rails.interface import Rail
from envelopay.rails.registry import judge_terms
from envelopay.worker.counterpay import CounterPaymentBook, CounterPayments, take_in_file
from envelopay.worker.refunds import Refunder, refunder_for

Clock = Callable[[], datetime]

__all__ = [
    "Clock",
    "answer_limits",
    "config_signer",
    "counterpayment_book",
    "dns_for",
    "dns_setup",
    "enforced_payer",
    "enforcer_hook",
    "garden_credential",
    "garden_endpoint_file",
    "garden_transport",
    "imap_config",
    "judge_accepted",
    "rail_options",
    "served_garden",
    "smtp_transport",
    "wait_policy",
    "worker_refunder",
]


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


def judge_accepted(cfg: WorkerConfig, rails: Mapping[str, Rail]) -> None:
    """Every [[accept]] rail (what METHODS offers, where INVOICEs ask to be paid) is one
    our rails can verify: a served chain, a known asset, a wallet spelled for its chain."""
    for i, acc in enumerate(cfg.accept):
        problem = judge_terms(rails, acc.chain, acc.token, wallet=acc.wallet)
        if problem is not None:
            raise ConfigError(f"config field accept.{i}.{problem.part}: {problem.detail}")


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


def counterpayment_book(cfg: WorkerConfig, store: Store, clock: Clock) -> CounterPaymentBook:
    """Where the OFFER counter-payments are written down: in the ledger on SQLite and
    PostgreSQL, so every process and host serving the address shares them (the rows an
    earlier version kept in a file beside the ledger are taken in once); in a file of its
    own beside a ledger of another kind."""
    ledger = cfg.agent.ledger
    if ledger.startswith(("postgresql://", "postgres://")):
        file = cfg.path("var") / "offers.db"
    else:
        file = cfg.path(ledger.removeprefix("sqlite:///")).with_suffix(".offers.db")
    if isinstance(store, SqlBase):
        book = CounterPayBook(store, local=cfg.agent.address, clock=clock)
        take_in_file(book, file)
        return book
    file.parent.mkdir(parents=True, exist_ok=True)
    return CounterPayments(file)


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


def rail_options(cfg: WorkerConfig, opts: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(opts)
    key = out.get("keypair")
    if isinstance(key, str):
        out["keypair"] = str(cfg.path(key))
    return out

