"""A bench script's role (`SCRIPT --role NAME --setup FILE`) as a child process, shared by
worker.py and jobs.py: started with a set-up file, ready when it prints `ready <value>`;
SIGTERM ends it, and its last line (JSON) is kept in `final`."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class RoleProcess:
    def __init__(self, script: Path, role: str, setup: dict[str, Any], workdir: Path,
                 args: Sequence[str] = ()) -> None:
        self.script, self.role, self.args = script, role, tuple(args)
        self.path = workdir / f"{role}-setup.json"
        self.path.write_text(json.dumps(setup))
        self.ready = ""
        self.final: dict[str, Any] = {}
        self.pid = 0

    async def __aenter__(self) -> RoleProcess:
        cmd = [sys.executable, str(self.script), "--role", self.role, "--setup", str(self.path), *self.args]
        self.proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
        self.pid = self.proc.pid
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 120)).decode()
        if not line.startswith("ready "):
            self.proc.kill()
            raise RuntimeError(f"{self.role} process said {line!r}")
        self.ready = line.split(" ", 1)[1].strip()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(self.proc.communicate(), 60)
        lines = out.decode().strip().splitlines()
        if lines:
            self.final = json.loads(lines[-1])
