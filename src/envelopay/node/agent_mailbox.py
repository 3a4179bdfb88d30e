"""The agent's own mailbox as the front ends open it: from --dir, --address and --config,
the environment, or the worker config (its directory, address and garden inbox)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envelopay.config import load_config
from envelopay.errors import ConfigError
from envelopay.mail.mailbox import Mailbox
from envelopay.mail.mailbox.site import MailboxSite, open_site, refused, site_from_env
from envelopay.mail.maildir import mailbox_path

__all__ = ["agent_mailbox_site", "open_agent_mailbox", "site_config", "worker_outcomes"]


def site_config(config: Path | None, site: MailboxSite, env: Mapping[str, str] = os.environ) -> Path | None:
    """The worker config a mailbox command reads, if any."""
    # An explicit --config always applies; otherwise a config is a default only when
    # no directory was given at all.
    if config is None and site.root is None:
        env_cfg = env.get("ENVELOPAY_CONFIG")
        if env_cfg:
            return Path(env_cfg)
        if Path("envelopay.toml").is_file():
            return Path("envelopay.toml")
    return config


def agent_mailbox_site(
    directory: Path | None,
    config: Path | None,
    address: str | None,
    env: Mapping[str, str] = os.environ,
) -> MailboxSite:
    """Explicit choices win, then the environment, then the worker config."""
    site = site_from_env(directory, address, env)
    config = site_config(config, site, env)
    if config is None:
        return site
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise refused(f"config: {exc}", "config") from exc
    inbox = None
    if cfg.transport.kind == "garden":
        # The worker's garden Maildir is this agent's inbox.
        inbox = mailbox_path(cfg.path(cfg.transport.garden_root), cfg.agent.address)
    return MailboxSite(site.root or Path(cfg.base_dir), site.address or cfg.agent.address, inbox)


def mailbox_signer(
    directory: Path | None, config: Path | None, address: str | None, env: Mapping[str, str] = os.environ
) -> Callable[[bytes], bytes] | None:
    """The DKIM signer of the worker config a mailbox command reads (`mail reply` signs
    with it, as the worker's own mail is signed); None without a config or a dkim_key."""
    path = site_config(config, site_from_env(directory, address, env), env)
    if path is None:
        return None
    try:
        cfg = load_config(path)
    except ConfigError as exc:
        raise refused(f"config: {exc}", "config") from exc
    # lazy: the wiring (rails, engine, transports) loads only when mail is signed
    from envelopay.node.agent_node import config_signer

    return config_signer(cfg)


@contextmanager
def open_agent_mailbox(
    directory: Path | None, config: Path | None, address: str | None
) -> Iterator[Mailbox]:
    """The chosen mailbox, refreshed from the garden, closed afterwards."""
    with open_site(agent_mailbox_site(directory, config, address)) as box:
        yield box


def worker_outcomes(
    directory: Path | None,
    config: Path | None,
    address: str | None,
    message_ids: Iterable[str | None],
    env: Mapping[str, str] = os.environ,
) -> dict[str, Mapping[str, Any]] | None:
    """What the worker of the config did with each of these mails (its ledger's outcome:
    status, detail, why unanswered), so `mail check` shows mail that is not protocol with
    its reason (SPEC.md "Replies in our thread; mail that is not protocol"). None with
    no config, or a SQLite ledger not created yet (a listing never creates one)."""
    path = site_config(config, site_from_env(directory, address, env), env)
    if path is None:
        return None
    cfg = load_config(path)
    url = cfg.agent.ledger
    if not url.startswith(("postgresql://", "postgres://")) and not cfg.path(url.removeprefix("sqlite:///")).is_file():
        return None
    # lazy: the wiring (rails, engine, transports) loads only when a ledger is read
    from envelopay.node.agent_node import open_store

    store = open_store(url, Path(cfg.base_dir))
    try:
        local = cfg.agent.address.lower()
        found = {mid: store.inbound_outcome(local, mid) for mid in message_ids if mid}
    finally:
        store.close()
    return {mid: outcome for mid, outcome in found.items() if outcome is not None}
