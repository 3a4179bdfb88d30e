"""A real, unprivileged Dovecot on loopback for tests and demos.

`Dovecot(root)` writes a generated configuration under `root` (IMAP and LMTP on free
loopback ports, users from a passwd-file, Maildirs under `root/mail/<user>`), starts
the daemon, and stops it again. It can be stopped and started on the same ports, which
is how the IMAP client's reconnect is tested. The pytest fixture `dovecot` (import it
into a conftest or use ``pytest_plugins = ["envelopay.testing.dovecot"]``) yields one
running instance with the users ``alice`` and ``bob`` (password ``secret``).

When run as root, Dovecot is started as ``nobody`` with ``setpriv`` (Dovecot refuses
some setups as root without privilege separation we don't want in tests); otherwise it
runs as the current user.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import shutil
import signal
import smtplib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Dovecot", "free_port", "running_dovecot"]


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> tuple[str, str, list[str]]:
    """(user, group, command prefix) under which the daemon runs."""
    if os.geteuid() == 0:
        user, group = "nobody", grp.getgrgid(pwd.getpwnam("nobody").pw_gid).gr_name
        prefix = ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups"]
        return user, group, prefix
    me = pwd.getpwuid(os.geteuid())
    return me.pw_name, grp.getgrgid(me.pw_gid).gr_name, []


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs (zombies hold no sockets; they don't count)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # exited while we looked
            continue
        # Fields after the parenthesised command name: state, ppid, pgrp, ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def _group_gone(pgid: int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for every process of group `pgid` to have exited."""
    deadline = time.monotonic() + timeout
    while _group_alive(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


@dataclass
class Dovecot:
    """One Dovecot instance rooted at `root` (a directory the caller owns and removes)."""

    root: Path
    users: Mapping[str, str] = field(default_factory=lambda: {"alice": "secret", "bob": "secret"})
    host: str = "127.0.0.1"
    imap_port: int = 0
    lmtp_port: int = 0
    start_timeout: float = 20.0
    # With a PEM certificate and key, an implicit-TLS (IMAPS) listener opens on imaps_port.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    imaps_port: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        if not self.imap_port:
            self.imap_port = free_port()
        if not self.lmtp_port:
            self.lmtp_port = free_port()
        if self.tls_cert is not None and not self.imaps_port:
            self.imaps_port = free_port()

    # -- paths
    @property
    def conf_path(self) -> Path:
        return self.root / "dovecot.conf"

    @property
    def log_path(self) -> Path:
        return self.root / "log" / "dovecot.log"

    def maildir(self, user: str) -> Path:
        """The user's Maildir (INBOX); other folders are `.<name>` inside it."""
        return self.root / "mail" / user / "Maildir"

    # -- configuration
    def _write_config(self) -> None:
        user, group, _ = _run_as()
        for sub in ("run", "state", "log", "mail"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        passwd = "".join(f"{name}:{{PLAIN}}{pw}::::::\n" for name, pw in self.users.items())
        (self.root / "passwd").write_text(passwd)
        # Paths below are absolute; %n is the user part of the login name.
        self.conf_path.write_text(
            f"""\
protocols = imap lmtp
listen = {self.host}
base_dir = {self.root}/run
state_dir = {self.root}/state
log_path = {self.log_path}
info_log_path = {self.log_path}
{self._ssl_settings()}
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{self.root}/mail/%n/Maildir
mail_uid = {user}
mail_gid = {group}
first_valid_uid = 0
default_internal_user = {user}
default_internal_group = {group}
default_login_user = {user}
lmtp_save_to_detail_mailbox = no
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%n {self.root}/passwd
}}
userdb {{
  driver = static
  args = uid={user} gid={group} home={self.root}/mail/%n
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = {self.host}
    port = {self.imap_port}
  }}
  inet_listener imaps {{
    address = {self.host}
    port = {self.imaps_port}
    ssl = yes
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = {self.host}
    port = {self.lmtp_port}
  }}
  unix_listener lmtp {{
    mode = 0600
  }}
}}
service anvil {{
  chroot =
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0600
  }}
  unix_listener stats-writer {{
    mode = 0600
  }}
}}
"""
        )
        if os.geteuid() == 0:
            # The daemon runs as nobody: it needs to own its tree.
            uid = pwd.getpwnam(user).pw_uid
            gid = grp.getgrnam(group).gr_gid
            for dirpath, dirnames, filenames in os.walk(self.root):
                os.chown(dirpath, uid, gid)
                for name in (*dirnames, *filenames):
                    os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
            os.chmod(self.root, 0o755)

    def _ssl_settings(self) -> str:
        if self.tls_cert is None or self.tls_key is None:
            return "ssl = no"
        # Copied into the root so the unprivileged daemon can read them.
        cert, key = self.root / "tls-cert.pem", self.root / "tls-key.pem"
        shutil.copyfile(self.tls_cert, cert)
        shutil.copyfile(self.tls_key, key)
        return f"ssl = yes\nssl_cert = <{cert}\nssl_key = <{key}"

    # -- lifecycle
    def start(self) -> None:
        if self.running:
            return
        binary = shutil.which("dovecot") or "/usr/sbin/dovecot"
        self._write_config()
        _, _, prefix = _run_as()
        # -F keeps the master in the foreground, so it is our child and we can stop it.
        self._proc = subprocess.Popen(
            [*prefix, binary, "-F", "-c", str(self.conf_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                self._proc = None
                raise RuntimeError(f"dovecot exited at start: {err}\n{self._log_tail()}")
            ports = [self.imap_port, self.lmtp_port] + ([self.imaps_port] if self.imaps_port else [])
            if all(self._accepts(p) for p in ports):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"dovecot did not listen within {self.start_timeout}s\n{self._log_tail()}")

    def stop(self) -> None:
        """Stop the daemon and wait for its listeners to close (connections drop)."""
        self._end(graceful=True)

    def kill(self) -> None:
        """SIGKILL every Dovecot process: connections die without a BYE (a crash)."""
        self._end(graceful=False)

    def _end(self, *, graceful: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            if not graceful:
                raise
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
        if proc.stderr:
            proc.stderr.close()
        # The master is gone, but its children (auth, log, anvil...) may still be exiting
        # and hold the listening sockets they inherited: a start now would find them
        # answering and fail with "Socket already exists". Wait for the whole group; the
        # master already gave its children 5 s, so a straggler is stuck: kill it.
        if not _group_gone(proc.pid, 5):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            if not _group_gone(proc.pid, 15):
                raise RuntimeError(f"dovecot processes of group {proc.pid} outlived SIGKILL")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self._accepts(self.imap_port):
            time.sleep(0.02)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _accepts(self, port: int) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.5)
            return s.connect_ex((self.host, port)) == 0

    def _log_tail(self) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])
        except OSError:
            return "(no log)"

    # -- test helpers
    def deliver(self, user: str, raw: bytes, sender: str = "sender@example.test") -> None:
        """Deliver one message to `user` through the LMTP listener (one recipient)."""
        with smtplib.LMTP(self.host, self.lmtp_port, timeout=30) as lmtp:
            lmtp.sendmail(sender, [user], raw)

    def __enter__(self) -> Dovecot:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_dovecot(
    users: Mapping[str, str] | None = None, *, tls_cert: Path | None = None, tls_key: Path | None = None
) -> Iterator[Dovecot]:
    """A started Dovecot in a fresh directory under the system temp dir, removed afterwards.

    Not under pytest's tmp_path: that tree is mode 0700 and the daemon may run as nobody."""
    root = Path(tempfile.mkdtemp(prefix="envelopay-dovecot-"))
    os.chmod(root, 0o755)
    server = Dovecot(root, tls_cert=tls_cert, tls_key=tls_key)
    if users is not None:
        server.users = users
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


try:
    import pytest
except ImportError:  # pytest is a dev dependency; the harness works without it
    pass
else:

    @pytest.fixture
    def dovecot() -> Iterator[Dovecot]:
        """A running Dovecot with users alice and bob (password "secret")."""
        with running_dovecot() as server:
            yield server
