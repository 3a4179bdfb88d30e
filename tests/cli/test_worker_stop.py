"""`envelopay worker serve` says that it stopped: Ctrl-C (SIGINT) and SIGTERM end the
serve loop gracefully, and the terminal hears it (seen missing on a new-user walk)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from tests._served import wire_garden

from envelopay.node.init import init_agent

WORKER = "worker@garden.local"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_worker_serve_reports_its_stop(tmp_path: Path, sig: signal.Signals) -> None:
    wdir = tmp_path / "worker"
    init_agent(wdir, address=WORKER)
    sock = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp")) / "lmtp.sock"  # a short socket path
    wire_garden(wdir / "envelopay.toml", tmp_path / "garden", sock, "", [])
    proc = subprocess.Popen([sys.executable, "-m", "envelopay.cli", "worker", "serve", "-c",
                             str(wdir / "envelopay.toml"), "--garden", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        ready = json.loads(proc.stdout.readline())  # printed (and flushed) once it serves
        assert ready["address"] == WORKER, ready
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr.read().strip().endswith(f"{WORKER} stopped")
