"""The agent's own mailbox as the front ends open it: from --dir, --address and --config,
the environment, or the worker config (its directory, address and garden inbox)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from envelopay.config import load_config
from envelopay.errors import ConfigError
from envelopay.mail.mailbox import Mailbox
from envelopay.mail.maildir import mailbox_path
from envelopay.mail.selection import MailboxSite, open_site, refused, site_from_env

__all__ = ["agent_mailbox_site", "open_agent_mailbox"]


def agent_mailbox_site(
    directory: Path | None,
    config: Path | None,
    address: str | None,
    env: Mapping[str, str] = os.environ,
) -> MailboxSite:
    """Explicit choices win, then the environment, then the worker config."""
    site = site_from_env(directory, address, env)
    # An explicit --config always applies; otherwise a config is a default only when
    # no directory was given at all.
    if config is None and site.root is None:
        env_cfg = env.get("ENVELOPAY_CONFIG")
        if env_cfg:
            config = Path(env_cfg)
        elif Path("envelopay.toml").is_file():
            config = Path("envelopay.toml")
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


@contextmanager
def open_agent_mailbox(
    directory: Path | None, config: Path | None, address: str | None
) -> Iterator[Mailbox]:
    """The chosen mailbox, refreshed from the garden, closed afterwards."""
    with open_site(agent_mailbox_site(directory, config, address)) as box:
        yield box
