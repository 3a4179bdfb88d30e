"""`envelopay garden serve` and `envelopay garden deliver` as real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from envelopay.mail.line_ends import read_message

ENVELOPAY = [sys.executable, "-m", "envelopay.cli"]
A = "worker@garden.local"


def test_serve_then_deliver_then_stop(tmp_path: Path) -> None:
    root = tmp_path / "mail"
    accounts = tmp_path / "accounts.json"
    made = subprocess.run([*ENVELOPAY, "garden", "account", "envoy@garden.local", "-a", "envoy@garden.local",
                           "--accounts", str(accounts)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    env = {**os.environ, "ENVELOPAY_GARDEN_SECRET": made.stdout.strip()}
    as_envoy = ["--user", "envoy@garden.local"]
    proc = subprocess.Popen(
        [*ENVELOPAY, "garden", "serve", "--root", str(root), "--address", A, "--port", "0", "--no-fsync",
         "--accounts", str(accounts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # blocks until the server is listening
        assert first.startswith("garden listening on 127.0.0.1:"), first + (
            proc.stderr.read() if proc.stderr else ""
        )
        endpoint = first.split()[3]
        msg = tmp_path / "m.eml"
        msg.write_bytes(b"From: envoy@garden.local\r\nSubject: WHICH\r\n\r\nhello\r\n")
        ok = subprocess.run(
            [
                *ENVELOPAY,
                "garden",
                "deliver",
                str(msg),
                "--to",
                A,
                "--from",
                "envoy@garden.local",
                "--endpoint",
                endpoint,
                *as_envoy,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert ok.returncode == 0, ok.stderr
        assert ok.stdout.startswith(f"{A}: 250")
        refused = subprocess.run(
            [
                *ENVELOPAY,
                "garden",
                "deliver",
                str(msg),
                "--to",
                "outsider@garden.local",
                "--endpoint",
                endpoint,
                *as_envoy,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert refused.returncode == 1 and "550" in refused.stdout
        bad = subprocess.run(
            [
                *ENVELOPAY,
                "garden",
                "deliver",
                str(msg),
                "--to",
                "a@garden.local, b@garden.local",
                "--endpoint",
                endpoint,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 2 and "several" in bad.stderr
        [delivered] = list((root / A / "new").iterdir())
        assert read_message(delivered).endswith(b"Subject: WHICH\r\n\r\nhello\r\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert "garden stopped: 1 delivered" in out


def test_serve_refuses_a_public_interface(tmp_path: Path) -> None:
    res = subprocess.run(
        [*ENVELOPAY, "garden", "serve", "--root", str(tmp_path), "--address", A, "--host", "0.0.0.0",
         "--open"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and "loopback" in res.stderr


def test_serve_wants_accounts_or_an_explicit_open(tmp_path: Path) -> None:
    res = subprocess.run([*ENVELOPAY, "garden", "serve", "--root", str(tmp_path), "--address", A],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "--accounts" in res.stderr and "--open" in res.stderr
    argv = [*ENVELOPAY, "garden", "serve", "--root", str(tmp_path), "--address", A, "--port", "0", "--open"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("garden listening on ")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "WARNING: --open: this garden is OPEN" in err
