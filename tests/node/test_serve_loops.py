"""`serve_worker` never serves on silently without one of its loops (issue 11, item 4).

Before, a pump task that died was only collected by `gather(return_exceptions=True)`
at shutdown: the process looked alive and served nothing. Here the worker's Maildir
cannot be opened (its path is a plain file), so the pump dies at once: serve_worker
logs it and raises, and the process would exit non-zero for its supervisor.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from envelopay.config import load_config
from envelopay.mail.maildir import mailbox_path
from envelopay.node.init import init_agent
from envelopay.node.serve import serve_worker

WORKER = "worker@garden.local"


async def test_a_dead_pump_stops_the_worker_loudly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    init_agent(tmp_path, address=WORKER)
    toml = tmp_path / "envelopay.toml"
    sock = tmp_path / "lmtp.sock"  # nothing listens there: the pump dies before any send
    toml.write_text(
        toml.read_text().replace(
            'garden_root = "var/garden"', f'garden_root = "var/garden"\ngarden_socket = "{sock}"'
        )
    )
    cfg = load_config(toml)
    box = mailbox_path(cfg.path(cfg.transport.garden_root), WORKER)
    box.parent.mkdir(parents=True, exist_ok=True)
    box.write_text("not a Maildir")
    stop = asyncio.Event()
    with (
        caplog.at_level(logging.ERROR, logger="envelopay.node.serve"),
        pytest.raises(RuntimeError, match="loop"),
    ):
        await asyncio.wait_for(serve_worker(cfg, echo=lambda _: None, stop=stop, retry_interval=0.1), 30)
    assert stop.is_set()
    assert any("ended while serving" in r.getMessage() for r in caplog.records)
