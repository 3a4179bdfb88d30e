"""`devnet up` / `down` / `status`: run the shared services, stop them, report them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.devnet import registry
from envelopay.devnet.chains import start_chains
from envelopay.devnet.state import DevnetState, pid_alive, read_state, state_path, write_state
from envelopay.errors import ConfigError
from envelopay.mail.garden import GardenServer
from envelopay.mail.garden_auth import file_stamp, load_accounts
from envelopay.mail.maildir import UnsafeMaildir, ensure_maildir, mailbox_path

__all__ = ["DevnetOptions", "describe", "probe", "run_devnet", "start_detached", "stop_devnet"]

REFRESH = 0.2  # seconds between looks at the agents registry
_log = logging.getLogger("envelopay.devnet")


@dataclass(frozen=True, slots=True)
class DevnetOptions:
    solana_port: int = 8899  # solana-test-validator's port
    base_port: int = 8545  # anvil's and geth's port
    slot_time: float = 0.4
    confirmed_after: int = 2
    finalized_after: int = 32
    block_time: float = 2.0  # Base's block time
    base_node: str = "auto"


def describe(state: DevnetState) -> list[str]:
    """What runs where, one line each (printed by `up` and `status`)."""
    s, b = state.solana, state.base
    return [
        f"solana  {s.rpc_url}  LiteSVM, a slot every {s.slot_time:g}s, confirmed after "
        f"{s.confirmed_after} / finalized after {s.finalized_after} slots",
        f"base    {b.rpc_url}  {b.node} (chain id {b.chain_id}), a block every {b.block_time:g}s, "
        f"USDC at {b.usdc}",
        f"garden  {state.garden_socket}  Maildirs under {state.garden_root}",
        f"dkim    the records of agents registered in {state.agents_dir}",
        f"state   {state_path(Path(state.home))}  (pid {state.pid})",
    ]


async def run_devnet(
    home: Path,
    options: DevnetOptions = DevnetOptions(),
    *,
    stop: asyncio.Event | None = None,
    echo: Callable[[str], Any] = print,
) -> None:
    """Serve until `stop` is set (or SIGINT/SIGTERM when none is given); then clean up."""
    home.mkdir(parents=True, exist_ok=True)
    running = _recorded_pid(home)
    if running is not None and pid_alive(running):
        raise ConfigError(f"a devnet already runs from {home} (pid {running}); `envelopay devnet down` first")
    stop = stop or _signal_stop()
    agents = registry.agents_dir(home)
    agents.mkdir(exist_ok=True)
    root = home / "garden"
    sock = home / "garden.sock"
    # The garden needs at least one address; this one receives nothing.
    known = registry.garden_addresses(registry.agent_entries(home)) | {"postmaster@devnet.local"}
    garden = GardenServer(root, sorted(known), unix_path=sock, accounts=[])
    sync = _RegistrySync(home, garden, frozenset(known))
    sync()
    garden.refresh = sync  # an agent registered since the last look is found at once
    await garden.start()
    chains = None
    try:
        chains = await start_chains(
            solana_port=options.solana_port, base_port=options.base_port, slot_time=options.slot_time,
            confirmed_after=options.confirmed_after, finalized_after=options.finalized_after,
            block_time=options.block_time, base_node=options.base_node)
        state = DevnetState(home=str(home), pid=os.getpid(), started=datetime.now(UTC).isoformat(),
                            solana=chains.solana, base=chains.base, garden_socket=str(sock),
                            garden_root=str(root), agents_dir=str(agents))
        write_state(state)
        for line in describe(state):
            echo(line)
        echo("devnet up; Ctrl-C or `envelopay devnet down` stops it")
        while not stop.is_set():
            sync()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), REFRESH)
    finally:
        if _recorded_pid(home) == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                state_path(home).unlink()
        if chains is not None:
            await chains.stop()
        await garden.stop()
        echo("devnet stopped")


EXTRA_ACCOUNTS = "garden-accounts.json"  # senders that are not agents (the enforcer)


class _RegistrySync:
    """Keeps the garden's addresses and accounts those of the registry (plus any in
    <home>/garden-accounts.json, e.g. the enforcer's), re-read when either changes."""

    def __init__(self, home: Path, garden: Any, always: frozenset[str]) -> None:
        self.home, self.garden, self.always = home, garden, always
        self._stamp: frozenset[tuple[str, int, int, int]] | None = None

    def _now(self) -> frozenset[tuple[str, int, int, int]]:
        # Each file's stamp: a directory's mtime alone is coarse (a clock tick), and two
        # registrations within one tick would look like one.

        files = [self.home / EXTRA_ACCOUNTS]
        with contextlib.suppress(FileNotFoundError):
            files += sorted(registry.agents_dir(self.home).glob("*.json"))
        stamps = ((f.name, file_stamp(f)) for f in files)
        return frozenset((name, *stamp) for name, stamp in stamps if stamp is not None)

    def __call__(self) -> None:
        stamp = self._now()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        entries = registry.agent_entries(self.home)
        addresses = registry.garden_addresses(entries) | self.always
        for address in addresses - self.garden.addresses:
            try:
                ensure_maildir(mailbox_path(self.garden.root, address))
            except UnsafeMaildir as exc:  # a planted symlink: deliveries to it get 451, others go on
                _log.warning("devnet garden: %s: %s", exc.filename, exc.strerror)
        accounts = registry.garden_accounts(entries)
        extra = self.home / EXTRA_ACCOUNTS
        if extra.exists():
            try:
                accounts += load_accounts(extra)
            except ConfigError as exc:  # said, and the agents keep being served
                _log.warning("devnet garden: %s left out: %s", extra, exc)
        # Both are read at each AUTH / RCPT; swapped whole, never edited in place.
        self.garden.accounts = {a.user: a for a in accounts}
        self.garden.addresses = frozenset(addresses)


def start_detached(home: Path, argv: list[str], *, timeout: float = 60.0) -> DevnetState:
    """Run `argv` (a `devnet up` without --detach) in its own session, output to
    <home>/devnet.log, and return its state once it is up."""
    home.mkdir(parents=True, exist_ok=True)
    running = _recorded_pid(home)
    if running is not None and pid_alive(running):
        raise ConfigError(f"a devnet already runs from {home} (pid {running}); `envelopay devnet down` first")
    log = (home / "devnet.log").open("ab")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "envelopay.cli", *argv], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    deadline = time.monotonic() + timeout
    while True:
        if _recorded_pid(home) == proc.pid:
            return read_state(home)
        if proc.poll() is not None:
            tail = (home / "devnet.log").read_text(errors="replace")[-600:]
            raise ConfigError(f"the devnet exited with {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            proc.terminate()
            raise ConfigError(f"the devnet did not come up within {timeout}s (see {home / 'devnet.log'})")
        time.sleep(0.05)


def _recorded_pid(home: Path) -> int | None:
    try:
        return read_state(home, require_running=False).pid
    except ConfigError:
        return None


def stop_devnet(home: Path, *, timeout: float = 15.0) -> DevnetState:
    """Ask the running devnet to stop (SIGTERM to its pid) and wait until it has."""
    state = read_state(home)
    os.kill(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # Until the process is gone, not only its state file (removed first as it stops): a
    # caller that starts a new devnet or signals again must not meet the old one still ending.
    while pid_alive(state.pid):
        if time.monotonic() > deadline:
            raise ConfigError(f"the devnet (pid {state.pid}) did not stop within {timeout}s")
        time.sleep(0.05)
    return state


async def probe(state: DevnetState) -> dict[str, str]:
    """Ask each service whether it answers: name → "ok <detail>" or "down <why>"."""
    import httpx  # lazy: keeps httpx off this module's import

    out: dict[str, str] = {}
    async with httpx.AsyncClient(timeout=3.0) as client:
        for name, url, method in (("solana", state.solana.rpc_url, "getSlot"),
                                  ("base", state.base.rpc_url, "eth_blockNumber")):
            try:
                doc = (await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                                    "params": []})).json()
                value = doc["result"]
                out[name] = f"ok {'slot' if name == 'solana' else 'block'} {int(str(value), 0)}"
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                out[name] = f"down {type(exc).__name__}"
    try:
        _, writer = await asyncio.open_unix_connection(state.garden_socket)
        writer.close()
        out["garden"] = "ok"
    except OSError as exc:
        out["garden"] = f"down {exc.strerror or exc}"
    return out


def _signal_stop() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    return stop
