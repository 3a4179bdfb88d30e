"""Anvil (Foundry's EVM node) as the Base rail's real dev node: find it, start it, stop it.

anvil comes from the npm registry (`@foundry-rs/anvil-linux-amd64`); the repository's
tools/package.json pins it and `scripts/services.sh` installs it into
tools/node_modules. `find_anvil()` looks, in order, at $ENVELOPAY_ANVIL, at
tools/node_modules/.bin/anvil in this checkout, then on $PATH.

`AnvilProcess` runs one anvil on a loopback port. With `block_time=None` anvil mines a
block per transaction (instant, for tests where timing is not the point); with a block
time it mines on that clock, as a real chain does. After start the local USDC token is
deployed (see `devchain.DevChain.deploy_token`), so the rail's "base-local" registry
entry names a real contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

import httpx

ANVIL_ENV = "ENVELOPAY_ANVIL"
DEFAULT_CHAIN_ID = 31337  # anvil's own default; "base-local" binds to whatever the node reports
START_TIMEOUT = 20.0


def find_anvil() -> str | None:
    """Path of an anvil binary, or None when none is installed."""
    explicit = os.environ.get(ANVIL_ENV)
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "tools" / "node_modules" / ".bin" / "anvil"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("anvil")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AnvilProcess:
    """One anvil child process on 127.0.0.1 (`async with AnvilProcess(...) as node: node.url`)."""

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        chain_id: int = DEFAULT_CHAIN_ID,
        block_time: float | None = None,
    ) -> None:
        found = binary or find_anvil()
        if found is None:
            raise FileNotFoundError("anvil is not installed (run scripts/services.sh, or set "
                                    "$ENVELOPAY_ANVIL)")
        if block_time is not None and block_time <= 0:
            raise ValueError("block_time must be positive (None = a block per transaction)")
        self.binary = found
        self.port = port or free_port()
        self.chain_id = chain_id
        self.block_time = block_time
        self.url = f"http://127.0.0.1:{self.port}/"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def argv(self) -> list[str]:
        argv = [self.binary, "--host", "127.0.0.1", "--port", str(self.port),
                "--chain-id", str(self.chain_id), "--silent", "--accounts", "1"]
        if self.block_time is not None:
            argv += ["--block-time", f"{self.block_time:g}"]
        return argv

    async def start(self) -> str:
        self._proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_TIMEOUT
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                if self._proc.poll() is not None:
                    err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                    raise RuntimeError(f"anvil exited with {self._proc.returncode}: {err[-400:]}")
                with contextlib.suppress(httpx.HTTPError):
                    ask = {"jsonrpc": "2.0", "id": 1, "method": "eth_chainId", "params": []}
                    answer = await client.post(self.url, json=ask)
                    if answer.status_code == 200 and int(answer.json()["result"], 16) == self.chain_id:
                        return self.url
                if loop.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"anvil did not answer on {self.url} within {START_TIMEOUT}s")
                await asyncio.sleep(0.05)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    async def __aenter__(self) -> AnvilProcess:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.stop()
