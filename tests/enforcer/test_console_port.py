"""`enforcer serve --socket S --console-port P`: agents reach the enforcer on the socket and
a browser reaches the operator console on loopback, from one process (README's enforcer
section starts it on a socket and sends the operator to the console)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_console_answers_on_its_port_beside_the_socket(tmp_path: Path) -> None:
    port, sock = _free_port(), tmp_path / "enforcer.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envelopay.cli", "enforcer", "serve", "--db", f"sqlite:///{tmp_path}/e.db",
         "--socket", str(sock), "--console-port", str(port),
         "--operator-token-file", str(tmp_path / "op.token"),
         "--smtp-host", "127.0.0.1", "--smtp-port", "9", "--smtp-security", "none"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "enforcer listening on" in line:
                assert f"console at http://127.0.0.1:{port}/console" in line, line
                break
        else:
            raise AssertionError(f"enforcer did not start (exit {proc.wait()})")
        page = httpx.get(f"http://127.0.0.1:{port}/console", timeout=10)
        assert page.status_code == 200 and "Sign in" in page.text
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as over_socket:
            assert "Sign in" in over_socket.get("http://localhost/console").text
            # Agents' API on the socket, as before.
            r = over_socket.post("http://localhost/v1/send", json={"to": "a@b.test"})
            assert r.status_code == 200 and r.json()["status"] == "blocked"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
