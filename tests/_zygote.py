"""A fork server for the tests that SIGKILL and restart a process many times.

Starting `python SCRIPT` costs an interpreter start plus the imports, about 0.7-2 s here
and nearly all of a start; a crash test that restarts its process 50-150 times spends its
minutes there. The server is one Python process that has imported SCRIPT's modules once
(it runs SCRIPT's top level under another name, so `if __name__ == "__main__"` stays
off) and forks a fresh copy of itself for each start. Each child is a separate process
in the state just after those imports: it runs SCRIPT as `python SCRIPT ARGS...` would
(run_name "__main__", its own argv and environment, stdout/stderr on the caller's pipes),
and a SIGKILL kills it alone, mid-write if it was writing. Nothing else is inherited:
the server opens no store, loop or thread before forking (it refuses to serve if
importing SCRIPT started a thread).

Client side (the test):

    with Zygote(SCRIPT) as z:
        child = z.spawn(args, env=..., stdout=PIPE, stderr=PIPE)
        child.stdout.readline(); child.kill(); child.wait(timeout=60)  # -9

`Child` has the part of `subprocess.Popen` the tests use (pid, stdout, stderr, poll, wait,
kill, send_signal(SIGKILL), communicate, returncode as a negative signal number).
The control channel is a SOCK_SEQPACKET socket pair (one JSON message per packet, the
child's pipe ends passed with SCM_RIGHTS). The server does the killing and the reaping,
so a pid is never signalled after it was reaped (and maybe reused).

Server side: `python _zygote.py SCRIPT`, the control socket's fd in $_ZYGOTE_CTRL_FD.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

PIPE = subprocess.PIPE
_MAX = 1 << 20


class Child:
    """One forked child, driven through its `Zygote`."""

    def __init__(self, zygote: Zygote, pid: int, stdout: IO[str] | None, stderr: IO[str] | None) -> None:
        self._z = zygote
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr

    @property
    def returncode(self) -> int | None:
        return self._z._exits.get(self.pid)

    def poll(self) -> int | None:
        self._z._pump(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self._z._pump(left)
        code = self.returncode
        assert code is not None
        return code

    def kill(self) -> None:
        """SIGKILL, unless it has already exited (the server knows, race-free)."""
        self._z._send({"kill": self.pid})

    def send_signal(self, sig: int) -> None:
        if sig != signal.SIGKILL:
            raise ValueError("the fork server only sends SIGKILL")
        self.kill()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Read stdout and stderr to their ends, then wait; like Popen.communicate."""
        import threading

        got: dict[int, str] = {}
        streams = [(i, s) for i, s in enumerate((self.stdout, self.stderr)) if s is not None]

        def drain(i: int, stream: IO[str]) -> None:
            got[i] = stream.read()  # through the file object: a readline() may have buffered

        readers = [threading.Thread(target=drain, args=(i, s), daemon=True) for i, s in streams]
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in readers:
            t.start()
        for t in readers:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        for _i, s in streams:
            s.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return got.get(0, ""), got.get(1, "")


class Zygote:
    """The client end of a fork server for `script` (see module docstring)."""

    def __init__(self, script: Path | str, *, timeout: float = 120) -> None:
        self.script = str(script)
        self._exits: dict[int, int] = {}
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, __file__, self.script],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(),),
                env={**os.environ, "_ZYGOTE_CTRL_FD": str(theirs.fileno())},
            )
        finally:
            theirs.close()
        msg = self._recv(timeout)
        if msg != {"ready": True}:
            self.close()
            raise RuntimeError(f"fork server for {self.script} did not start: {msg}")

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the server; it SIGKILLs and reaps any child still running."""
        self._sock.close()
        try:
            self._proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def spawn(
        self,
        args: list[str],
        *,
        env: dict[str, str] | None = None,
        stdout: int | None = None,
        stderr: int | None = None,
    ) -> Child:
        """Fork a child running `python SCRIPT *args` with `env` (default: ours).

        stdout/stderr: PIPE for a pipe to read, None to share the server's (ours)."""
        mine: list[IO[str] | None] = []
        theirs: list[int] = []
        names: list[str] = []
        for name, want in (("stdout", stdout), ("stderr", stderr)):
            if want == PIPE:
                r, w = os.pipe()
                mine.append(os.fdopen(r, "r"))
                theirs.append(w)
                names.append(name)
            elif want is None:
                mine.append(None)
            else:
                raise ValueError("stdout/stderr: PIPE or None")
        environ = dict(os.environ if env is None else env)
        request = {"argv": [self.script, *args], "env": environ, "fds": names}
        try:
            self._send(request, theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        while True:
            msg = self._recv(60)
            if "pid" in msg:
                # A reused pid: its earlier owner's exit came before this answer.
                self._exits.pop(msg["pid"], None)
                return Child(self, msg["pid"], mine[0], mine[1])
            self._note(msg)

    # -- the control channel ----------------------------------------------------------

    def _send(self, msg: dict[str, Any], fds: list[int] | None = None) -> None:
        data = json.dumps(msg).encode()
        if fds:
            socket.send_fds(self._sock, [data], fds)
        else:
            self._sock.send(data)

    def _recv(self, timeout: float | None) -> dict[str, Any]:
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            raise TimeoutError(f"fork server for {self.script}: no answer in {timeout} s")
        data = self._sock.recv(_MAX)
        if not data:
            raise RuntimeError(f"fork server for {self.script} exited ({self._proc.poll()})")
        out: dict[str, Any] = json.loads(data)
        return out

    def _note(self, msg: dict[str, Any]) -> None:
        if "exit" in msg:
            self._exits[msg["exit"]] = msg["code"]
        else:
            raise RuntimeError(f"fork server for {self.script}: unexpected {msg}")

    def _pump(self, timeout: float | None) -> None:
        """Take in the server's exit reports: wait up to `timeout` for the first."""
        while True:
            ready, _, _ = select.select([self._sock], [], [], timeout)
            if not ready:
                return
            self._note(self._recv(0))
            timeout = 0


# ------------------------------------------------------------------------- server


def _run_child(script: str, msg: dict[str, Any], fds: list[int], ctrl: socket.socket) -> None:
    """In the forked child: become `python SCRIPT ARGS...`; never returns."""
    code = 1
    try:
        ctrl.close()
        for name, fd in zip(msg["fds"], fds, strict=True):
            os.dup2(fd, 1 if name == "stdout" else 2)
            os.close(fd)
        os.environ.clear()
        os.environ.update(msg["env"])
        sys.argv = list(msg["argv"])
        import runpy

        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if not isinstance(e.code, int | None):
                print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _serve(script: str) -> None:
    import runpy
    import threading

    ctrl = socket.socket(fileno=int(os.environ.pop("_ZYGOTE_CTRL_FD")))
    sys.path[0] = str(Path(script).resolve().parent)  # as `python SCRIPT` would have it
    sys.argv = [script]
    runpy.run_path(script, run_name="__zygote_preload__")  # the imports, not main
    if threading.active_count() != 1:
        ctrl.send(json.dumps({"error": "importing the script started a thread"}).encode())
        return
    sys.stdout.flush()
    sys.stderr.flush()
    ctrl.send(json.dumps({"ready": True}).encode())
    live: dict[int, int] = {}  # pidfd -> pid

    def report(pidfd: int) -> None:
        pid = live.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        ctrl.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())

    while True:
        ready, _, _ = select.select([ctrl, *live], [], [])
        for fd in ready:
            if fd in live:
                report(fd)
        if ctrl not in ready:
            continue
        data, fds, _flags, _addr = socket.recv_fds(ctrl, _MAX, 4)
        if not data:  # the test is done: nothing outlives it
            for pidfd, pid in list(live.items()):
                os.kill(pid, signal.SIGKILL)
                report(pidfd)
            return
        msg = json.loads(data)
        if "kill" in msg:
            if msg["kill"] in live.values():  # not reaped yet, so still this process
                os.kill(msg["kill"], signal.SIGKILL)
            continue
        pid = os.fork()
        if pid == 0:
            for pidfd in live:
                os.close(pidfd)
            _run_child(script, msg, fds, ctrl)
        for fd in fds:
            os.close(fd)
        live[os.pidfd_open(pid)] = pid
        ctrl.send(json.dumps({"pid": pid}).encode())


if __name__ == "__main__":
    _serve(sys.argv[1])
