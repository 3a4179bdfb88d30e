"""A real Postfix (Debian's package) on loopback, with its own configuration and queue.

`Postfix(root, routes)` writes main.cf and master.cf under `root/etc`, keeps its queue
under `root/queue` and its log in `root/log/maillog`, listens for SMTP on one loopback
port and routes mail by recipient domain through `routes` (a transport(5) table:
``{"worker.test": "lmtp:inet:127.0.0.1:24001", "far.test": "smtp:[127.0.0.1]:2526"}``).
Any other domain is refused at RCPT time (no open relay, no DNS). It never touches the
system's own instance: `postfix -c ROOT/etc start|stop` as root, no chroot, no DNS.

What the tests wait on is Postfix's own state, never a fixed sleep: `queue()` reads
`postqueue -j`, `wait_queue_empty()` polls it, `flush()` asks for an immediate retry of
deferred mail, and the maillog tells a delivery's outcome.

Run as root (Postfix's master must start as root; its daemons run as `postfix`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envelopay.testing.dovecot import free_port

__all__ = [
    "TRACE_FIELDS",
    "NextHop",
    "Postfix",
    "postfix_available",
    "process_alive",
    "read_policy_request",
    "running_postfix",
    "strip_trace",
]

_SBIN = "/usr/sbin"

# Every service runs unchrooted (column 5 = n): the private queue lives under a temp dir.
_MASTER = """\
{host}:{port} inet n - n - - smtpd
pickup    unix  n - n 60 1 pickup
cleanup   unix  n - n -  0 cleanup
qmgr      unix  n - n 300 1 qmgr
rewrite   unix  - - n -  - trivial-rewrite
bounce    unix  - - n -  0 bounce
defer     unix  - - n -  0 bounce
trace     unix  - - n -  0 bounce
verify    unix  - - n -  1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -  - proxymap
smtp      unix  - - n -  - smtp
relay     unix  - - n -  - smtp
showq     unix  n - n -  - showq
error     unix  - - n -  - error
retry     unix  - - n -  - error
discard   unix  - - n -  - discard
lmtp      unix  - - n -  - lmtp
anvil     unix  - - n -  1 anvil
scache    unix  - - n -  1 scache
postlog   unix-dgram n - n - 1 postlogd
"""


async def read_policy_request(reader: asyncio.StreamReader) -> dict[str, str]:
    """One request of Postfix's policy delegation protocol (SMTPD_POLICY_README):
    `name=value` lines ended by an empty line; {} once Postfix closed the connection.
    The answer is `action=...` and an empty line."""
    attrs: dict[str, str] = {}
    while line := (await reader.readline()).decode().strip():
        key, _, value = line.partition("=")
        attrs[key] = value
    return attrs


def postfix_available() -> bool:
    """Whether Debian's Postfix binaries are installed (scripts/services.sh installs them)."""
    return os.path.exists(f"{_SBIN}/postfix") and os.path.exists("/usr/lib/postfix/sbin/master")


@dataclass
class Postfix:
    """One private Postfix instance rooted at `root` (a directory the caller owns)."""

    root: Path
    routes: Mapping[str, str]
    host: str = "127.0.0.1"
    port: int = 0
    hostname: str = "mx.envelopay.test"
    # Retry deferred mail within a second or two (Postfix's default is minutes).
    backoff: tuple[str, str] = ("1s", "2s")
    extra: Mapping[str, str] = field(default_factory=dict)  # more main.cf settings
    _started: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if not self.port:
            self.port = free_port()

    # -- paths
    @property
    def config_dir(self) -> Path:
        return self.root / "etc"

    @property
    def queue_dir(self) -> Path:
        return self.root / "queue"

    @property
    def log_path(self) -> Path:
        return self.root / "log" / "maillog"

    def _settings(self) -> dict[str, str]:
        domains = " ".join(sorted(self.routes))
        return {
            "compatibility_level": "3.6",
            "queue_directory": str(self.queue_dir),
            "data_directory": str(self.root / "data"),
            "daemon_directory": "/usr/lib/postfix/sbin",
            "meta_directory": "/etc/postfix",
            "shlib_directory": "/usr/lib/postfix",
            "command_directory": _SBIN,
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": self.hostname,
            "mydomain": self.hostname.partition(".")[2] or self.hostname,
            "myorigin": "$myhostname",
            "mydestination": "",
            "inet_interfaces": self.host,
            "inet_protocols": "ipv4",
            "mynetworks": "127.0.0.0/8",
            "relay_domains": domains,
            "transport_maps": f"texthash:{self.config_dir}/transport",
            # Only the routed domains are accepted, from anyone: no open relay, no surprises.
            "smtpd_relay_restrictions": "reject_unauth_destination",
            "smtpd_recipient_restrictions": "",
            # Loopback only: no DNS at all (routes name [host]:port next hops).
            "smtp_dns_support_level": "disabled",
            "lmtp_dns_support_level": "disabled",
            "smtp_host_lookup": "native",
            "lmtp_host_lookup": "native",
            "alias_maps": "",
            "alias_database": "",
            "local_recipient_maps": "",
            "biff": "no",
            "append_dot_mydomain": "no",
            "smtputf8_enable": "no",
            "maillog_file": str(self.log_path),
            "maillog_file_prefixes": str(self.root),  # the default allows only /var and /dev/stdout
            "minimal_backoff_time": self.backoff[0],
            "maximal_backoff_time": self.backoff[1],
            "queue_run_delay": self.backoff[0],
            "delay_warning_time": "0",
            "smtpd_banner": "$myhostname ESMTP",
            **self.extra,
        }

    def _write_config(self) -> None:
        for sub in ("etc", "queue", "data", "log"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # The daemons run as `postfix`: they must be able to reach their queue and data.
        os.chmod(self.root, 0o755)
        shutil.chown(self.root / "data", "postfix", "postfix")
        (self.config_dir / "main.cf").write_text("".join(f"{k} = {v}\n" for k, v in self._settings().items()))
        (self.config_dir / "master.cf").write_text(_MASTER.format(host=self.host, port=self.port))
        table = "".join(f"{domain} {route}\n" for domain, route in sorted(self.routes.items()))
        (self.config_dir / "transport").write_text(table)
        self.log_path.touch()

    # -- lifecycle
    def start(self, timeout: float = 30.0) -> None:
        if self._started:
            return
        self._write_config()
        self._fresh_queue()
        self._postfix("start")
        self._started = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._accepts():
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"postfix did not listen on {self.port} within {timeout}s\n{self.log_tail()}")

    def _fresh_queue(self) -> None:
        """Lay out a new queue as postfix-files(5) does and mark it for a quick start.

        `postfix start` otherwise runs its integrity checks (post-install create-missing,
        a scan of every queue, the ownership of the whole installation): ~3 s here, each
        time. A queue we just created has nothing to check."""
        if (self.queue_dir / "active").exists():
            return  # not fresh: let `postfix start` check it
        for name in ("active", "bounce", "corrupt", "defer", "deferred", "flush", "hold",
                     "incoming", "private", "saved", "trace"):
            d = self.queue_dir / name
            d.mkdir(mode=0o700)
            shutil.chown(d, "postfix")
        for name, mode in (("maildrop", 0o730), ("public", 0o710)):
            d = self.queue_dir / name
            d.mkdir()
            os.chmod(d, mode)
            shutil.chown(d, "postfix", "postdrop")
        (self.queue_dir / "pid").mkdir(mode=0o755)
        os.chmod(self.queue_dir, 0o755)
        (self.queue_dir / "quick-start").touch()

    def stop(self) -> None:
        """Stop the master and its daemons; wait until the listener is gone."""
        if not self._started:
            return
        self._started = False
        with contextlib.suppress(subprocess.CalledProcessError):
            self._postfix("stop")
        pid = self._master_pid()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and (self._accepts() or (pid and process_alive(pid))):
            time.sleep(0.02)

    def _master_pid(self) -> int | None:
        try:
            return int((self.queue_dir / "pid" / "master.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _postfix(self, *args: str) -> str:
        done = subprocess.run(
            [f"{_SBIN}/postfix", "-c", str(self.config_dir), *args],
            capture_output=True, text=True, timeout=60, check=False,
        )
        if done.returncode != 0:
            raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout, done.stderr)
        return done.stdout + done.stderr

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            return s.connect_ex((self.host, self.port)) == 0

    # -- the queue
    def queue(self) -> list[dict[str, Any]]:
        """Every message in the queue (active, deferred, …) as `postqueue -j` reports it."""
        done = subprocess.run(
            [f"{_SBIN}/postqueue", "-c", str(self.config_dir), "-j"],
            capture_output=True, text=True, timeout=60, check=True,
        )
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def wait_queue_empty(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.queue():
                return
            time.sleep(0.05)
        raise TimeoutError(f"postfix queue not empty after {timeout}s: {self.queue()}\n{self.log_tail()}")

    def flush(self) -> None:
        """Retry deferred mail now (`postqueue -f`)."""
        subprocess.run([f"{_SBIN}/postqueue", "-c", str(self.config_dir), "-f"],
                       capture_output=True, timeout=60, check=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_log(self, needle: str, timeout: float = 60.0) -> str:
        """Wait until a maillog line contains `needle`; return that line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if needle in line:
                    return line
            time.sleep(0.05)
        raise TimeoutError(f"no maillog line with {needle!r} after {timeout}s\n{self.log_tail()}")

    def __enter__(self) -> Postfix:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def process_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie awaiting its reaper counts as gone: Postfix's master
    is a daemon, reaped by whatever PID 1 the machine has)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def running_postfix(routes: Mapping[str, str], **kw: Any) -> Iterator[Postfix]:
    """A started Postfix in a fresh directory under the system temp dir, removed afterwards.

    Not under pytest's tmp_path: that tree is mode 0700 and the daemons run as `postfix`."""
    root = Path(tempfile.mkdtemp(prefix="envelopay-postfix-"))
    server = Postfix(root, routes, **kw)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


# Trace fields an MTA or the delivering server adds on the way (RFC 5321 §4.4, RFC 9228).
TRACE_FIELDS = frozenset({b"received", b"return-path", b"delivered-to", b"x-original-to"})


def strip_trace(raw: bytes) -> bytes:
    """`raw` with CRLF line ends and without its trace header fields (a message as
    submitted, to compare with a copy that went through Postfix and Dovecot)."""
    text = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    head, sep, body = text.partition(b"\r\n\r\n")
    kept: list[bytes] = []
    dropping = False
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                kept.append(line)
            continue
        name = line.split(b":", 1)[0].strip().lower()
        dropping = name in TRACE_FIELDS
        if not dropping:
            kept.append(line)
    return b"\r\n".join(kept) + sep + body


@dataclass
class NextHop:
    """The SMTP server after Postfix (the buyer's MX, say), answering RCPT as scripted.

    `script` maps a recipient to the replies its successive RCPTs get ("451 4.3.0 …",
    "550 5.1.1 …"); once a recipient's script is used up, or for anyone else, 250.
    Runs aiosmtpd in its own thread, so it outlives any one event loop."""

    script: Mapping[str, list[str]] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 0
    messages: list[tuple[tuple[str, ...], bytes]] = field(default_factory=list, init=False)
    rcpt_log: list[tuple[str, str]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not self.port:
            self.port = free_port()
        self._left = {k.lower(): list(v) for k, v in self.script.items()}
        self._cond = threading.Condition()
        self._controller: Any = None

    # aiosmtpd handler hooks
    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        with self._cond:
            queue = self._left.get(address.lower())
            reply = queue.pop(0) if queue else "250 2.1.5 OK"
            self.rcpt_log.append((address.lower(), reply))
            self._cond.notify_all()
        if reply.startswith("250"):
            envelope.rcpt_tos.append(address)
        return reply

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self._cond:
            self.messages.append((tuple(envelope.rcpt_tos), envelope.original_content or envelope.content))
            self._cond.notify_all()
        return "250 2.0.0 OK"

    def wait(self, predicate: Any, timeout: float = 60.0) -> None:
        """Block until `predicate(self)` holds (checked at every RCPT and DATA)."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self), timeout):
                raise TimeoutError(f"next hop: condition not met in {timeout}s; saw {self.rcpt_log}")

    def start(self) -> None:
        from aiosmtpd.controller import Controller  # lazy: keeps aiosmtpd off this module's import

        self._controller = Controller(self, hostname=self.host, port=self.port, decode_data=False)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def route(self) -> str:
        """Its transport(5) entry for `Postfix.routes`."""
        return f"smtp:[{self.host}]:{self.port}"
