"""IMAP in against a real Dovecot on loopback (envelopay.testing.dovecot)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import aioimaplib
import pytest

from envelopay.errors import ConfigError, TransportError
from envelopay.mail.imap import ImapConfig, ImapMessage, ImapSource, Processed, SyncState, parse_fetch
from envelopay.testing.dovecot import Dovecot, running_dovecot
from envelopay.testing.tls import self_signed

FLAG = "$EnvelopayProcessed"
WAIT = 60.0  # generous: the machine is shared and loaded


@pytest.fixture
def dovecot() -> object:
    with running_dovecot() as server:
        yield server


def raw_mail(n: int, subject: str = "hello") -> bytes:
    return (
        f"From: sender@example.test\r\nTo: alice@example.test\r\nSubject: {subject} {n}\r\n"
        f"Message-ID: <m{n}@example.test>\r\nDate: Mon, 30 Nov 2026 10:00:00 +0000\r\n\r\n"
        f"body number {n}\r\n"
    ).encode()


def config(d: Dovecot, **kw: object) -> ImapConfig:
    return ImapConfig(host=d.host, port=d.imap_port, user="alice", password="secret", **kw)  # type: ignore[arg-type]


class Recorder:
    """A consumer that records what it saw; `fail` decides per message whether to refuse it."""

    def __init__(self, fail: Callable[[ImapMessage], bool] = lambda m: False) -> None:
        self.seen: list[ImapMessage] = []
        self.fail = fail
        self.changed = asyncio.Event()

    async def __call__(self, msg: ImapMessage) -> bool:
        self.seen.append(msg)
        self.changed.set()
        return not self.fail(msg)

    def subjects(self) -> list[str]:
        out = []
        for m in self.seen:
            for line in m.raw.split(b"\r\n"):
                if line.startswith(b"Subject: "):
                    out.append(line[9:].decode())
        return out

    async def wait_for(self, pred: Callable[[], bool]) -> None:
        async def loop() -> None:
            while not pred():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), WAIT)


async def imap_client(d: Dovecot, mailbox: str = "INBOX") -> aioimaplib.IMAP4:
    c = aioimaplib.IMAP4(d.host, d.imap_port, timeout=WAIT)
    await c.wait_hello_from_server()
    assert (await c.login("alice", "secret")).result == "OK"
    if mailbox:
        assert (await c.select(mailbox)).result == "OK"
    return c


async def flags_of(d: Dovecot, mailbox: str = "INBOX") -> dict[int, frozenset[str]]:
    c = await imap_client(d, mailbox)
    try:
        r = await c.uid("fetch", "1:*", "(UID FLAGS)")
        out: dict[int, frozenset[str]] = {}
        for line in r.lines:
            text = bytes(line).decode()
            if " FETCH " in text:
                uid = int(text.split("UID ")[1].split()[0].rstrip(")"))
                flags = text.split("FLAGS (")[1].split(")")[0].split()
                out[uid] = frozenset(flags)
        return out
    finally:
        await c.logout()


async def test_sync_once_fetches_exact_bytes_and_marks_after_success(dovecot: Dovecot) -> None:
    for n in (1, 2, 3):
        dovecot.deliver("alice", raw_mail(n))
    rec = Recorder()
    src = ImapSource(config(dovecot))
    assert await src.sync_once(rec) == 3
    assert rec.subjects() == ["hello 1", "hello 2", "hello 3"]
    # BODY.PEEK[] returns the stored bytes: the original message follows the LMTP trace headers.
    assert all(m.raw.endswith(raw_mail(i + 1)) for i, m in enumerate(rec.seen))
    assert [m.uid for m in rec.seen] == [1, 2, 3]
    flags = await flags_of(dovecot)
    assert all(FLAG in f for f in flags.values())
    assert all("\\Seen" not in f for f in flags.values())  # PEEK leaves \Seen alone
    # A second pass offers nothing: marked messages are done.
    rec2 = Recorder()
    assert await ImapSource(config(dovecot)).sync_once(rec2) == 0
    assert rec2.seen == []


async def test_consumer_failure_leaves_message_unmarked_for_next_pass(dovecot: Dovecot) -> None:
    for n in (1, 2, 3):
        dovecot.deliver("alice", raw_mail(n))

    def boom(m: ImapMessage) -> bool:
        if b"hello 2" in m.raw:
            raise RuntimeError("ledger down")
        return b"hello 3" in m.raw  # refuse #3 by returning False

    rec = Recorder(fail=boom)
    src = ImapSource(config(dovecot))
    assert await src.sync_once(rec) == 1
    assert src.stats.consumer_failures == 2
    flags = await flags_of(dovecot)
    assert FLAG in flags[1] and FLAG not in flags[2] and FLAG not in flags[3]
    rec2 = Recorder()
    assert await src.sync_once(rec2) == 2
    assert rec2.subjects() == ["hello 2", "hello 3"]
    assert all(FLAG in f for f in (await flags_of(dovecot)).values())


async def test_move_to_folder_after_success(dovecot: Dovecot) -> None:
    c = await imap_client(dovecot, mailbox="")
    assert (await c.create("Processed")).result == "OK"
    await c.logout()
    dovecot.deliver("alice", raw_mail(1))
    dovecot.deliver("alice", raw_mail(2))
    rec = Recorder(fail=lambda m: b"hello 2" in m.raw)
    src = ImapSource(config(dovecot, move_to="Processed"))
    assert await src.sync_once(rec) == 1
    inbox = await flags_of(dovecot)
    moved = await flags_of(dovecot, "Processed")
    assert list(inbox) == [2] and FLAG not in inbox[2]
    assert len(moved) == 1 and all(FLAG in f for f in moved.values())


async def test_uidvalidity_change_triggers_full_resync(dovecot: Dovecot) -> None:
    c = await imap_client(dovecot, mailbox="")
    assert (await c.create("Work")).result == "OK"
    for n in (1, 2):
        assert (await c.append(raw_mail(n), mailbox="Work")).result == "OK"
    await c.logout()
    src = ImapSource(config(dovecot, mailbox="Work"))
    rec = Recorder()
    assert await src.sync_once(rec) == 2
    first_validity = src.state.uidvalidity
    # Pretend the flag store for UID 1 and 2 was lost with a connection (consumed, unflagged).
    src.state.unflagged_done.update({1, 2})
    # The mailbox is recreated: same UIDs 1 and 2, different messages, new UIDVALIDITY.
    c = await imap_client(dovecot, mailbox="")
    assert (await c.delete("Work")).result == "OK"
    assert (await c.create("Work")).result == "OK"
    for n in (7, 8):
        assert (await c.append(raw_mail(n), mailbox="Work")).result == "OK"
    await c.logout()
    rec2 = Recorder()
    assert await src.sync_once(rec2) == 2
    assert src.state.uidvalidity != first_validity
    assert src.stats.full_resyncs == 1
    # Without the UIDVALIDITY check the held UIDs 1 and 2 would be flagged unseen.
    assert rec2.subjects() == ["hello 7", "hello 8"]
    assert [m.uidvalidity for m in rec2.seen] == [src.state.uidvalidity] * 2


async def test_unflagged_done_is_flagged_without_consuming_again(dovecot: Dovecot, tmp_path: object) -> None:
    dovecot.deliver("alice", raw_mail(1))
    src = ImapSource(config(dovecot))
    # First pass learns UIDVALIDITY; the consumer refuses so nothing is marked.
    await src.sync_once(Recorder(fail=lambda m: True))
    # The consumer committed but the STORE never reached the server (connection broke).
    src.state.unflagged_done.add(1)
    rec = Recorder()
    assert await src.sync_once(rec) == 1
    assert rec.seen == []
    assert FLAG in (await flags_of(dovecot))[1]


async def test_sync_state_persists_atomically(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "imap-state.json"
    st = SyncState.load(path)
    assert st.uidvalidity is None
    st.observe_uidvalidity(42)
    st.last_uid = 9
    st.unflagged_done.add(5)
    st.save()
    again = SyncState.load(path)
    assert (again.uidvalidity, again.last_uid, again.unflagged_done) == (42, 9, {5})
    assert again.observe_uidvalidity(43) is True
    assert (again.last_uid, again.unflagged_done) == (0, set())
    path.write_text("{not json")
    with pytest.raises(ConfigError):
        SyncState.load(path)


async def run_source(src: ImapSource, rec: Recorder) -> tuple[asyncio.Event, asyncio.Task[None]]:
    stop = asyncio.Event()
    task = asyncio.create_task(src.run(rec, stop))
    await asyncio.wait_for(src.connected.wait(), WAIT)
    return stop, task


async def stop_source(stop: asyncio.Event, task: asyncio.Task[None]) -> None:
    stop.set()
    await asyncio.wait_for(task, WAIT)


async def test_idle_push_delivers_new_mail(dovecot: Dovecot) -> None:
    dovecot.deliver("alice", raw_mail(1))
    src = ImapSource(config(dovecot))
    rec = Recorder()
    stop, task = await run_source(src, rec)
    try:
        await rec.wait_for(lambda: len(rec.seen) == 1)  # the initial full pass
        for n in (2, 3):
            await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(n))
        await rec.wait_for(lambda: len(rec.seen) == 3)
        # Dovecot assigns UIDs when it syncs the Maildir, not strictly in delivery order.
        assert sorted(rec.subjects()) == ["hello 1", "hello 2", "hello 3"]
        assert src.stats.connects == 1
    finally:
        await stop_source(stop, task)
    assert task.done() and task.exception() is None
    assert all(FLAG in f for f in (await flags_of(dovecot)).values())


async def test_idle_reconnects_after_server_restart(dovecot: Dovecot) -> None:
    src = ImapSource(config(dovecot, reconnect_initial=0.05, reconnect_max=0.5))
    rec = Recorder()
    stop, task = await run_source(src, rec)
    try:
        await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(1))
        await rec.wait_for(lambda: len(rec.seen) == 1)
        src.connected.clear()
        await asyncio.to_thread(dovecot.stop)  # kill the server under the open IDLE
        await asyncio.sleep(0)  # let the loop notice while the server is down
        await asyncio.to_thread(dovecot.start)  # same ports
        await asyncio.wait_for(src.connected.wait(), WAIT)
        await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(2))
        await rec.wait_for(lambda: len(rec.seen) == 2)
        assert rec.subjects() == ["hello 1", "hello 2"]
        assert src.stats.connects >= 2 and src.stats.disconnects >= 1
    finally:
        await stop_source(stop, task)


def _processes(d: Dovecot) -> dict[int, str]:
    """pid -> command line of every live (not zombie) process of `d`'s daemon: its master
    (the one naming d's config) and the master's process group."""
    procs: dict[int, tuple[str, str, str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():  # self, thread-self, sys...
            continue
        try:
            stat = (entry / "stat").read_text()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, UnicodeDecodeError):  # gone meanwhile
            continue
        state, _, pgrp = stat[stat.rfind(")") + 2 :].split()[:3]
        procs[int(entry.name)] = (state, pgrp, args)
    masters = [str(pid) for pid, (_, _, args) in procs.items() if str(d.conf_path) in args]
    return {pid: args for pid, (state, pgrp, args) in procs.items() if pgrp in masters and state != "Z"}


def test_a_restart_outlasts_a_child_that_outlives_the_master(dovecot: Dovecot) -> None:
    """Dovecot's master gives its children 5 s to die, then exits; a child still running holds
    the listening sockets it inherited, and a new master that finds them answering refuses to
    start ("Socket already exists", once seen as a flaky restart under load). A SIGSTOPped
    child is such a straggler on demand: stop() waits for, then kills, the whole daemon."""
    before = _processes(dovecot)
    anvil = next(pid for pid, args in before.items() if args.endswith("/anvil"))
    os.kill(anvil, signal.SIGSTOP)  # SIGTERM stays pending: it outlives the master
    dovecot.restart()  # raised RuntimeError ("Socket already exists: .../anvil") before
    after = _processes(dovecot)
    assert anvil not in after and not set(before) & set(after)
    assert any(args.endswith("/anvil") for args in after.values())
    dovecot.deliver("alice", raw_mail(1))  # the new daemon serves


async def test_idle_reconnects_after_server_crash(dovecot: Dovecot) -> None:
    src = ImapSource(config(dovecot, reconnect_initial=0.05, reconnect_max=0.5))
    rec = Recorder()
    stop, task = await run_source(src, rec)
    try:
        src.connected.clear()
        await asyncio.to_thread(dovecot.kill)  # SIGKILL: no BYE, the sockets just die
        await asyncio.to_thread(dovecot.start)
        await asyncio.wait_for(src.connected.wait(), WAIT)
        await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(3))
        await rec.wait_for(lambda: len(rec.seen) == 1)
        assert rec.subjects() == ["hello 3"]
        assert src.stats.disconnects >= 1 and src.stats.connects >= 2
    finally:
        await stop_source(stop, task)


async def test_idle_catches_mail_that_arrived_while_disconnected(dovecot: Dovecot) -> None:
    src = ImapSource(config(dovecot, reconnect_initial=1.0, reconnect_max=1.0))
    rec = Recorder()
    stop, task = await run_source(src, rec)
    try:
        src.connected.clear()
        await asyncio.to_thread(dovecot.restart)
        # Delivered before the source has redialled: only the reconnect's full pass can see it.
        await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(5))
        await rec.wait_for(lambda: len(rec.seen) == 1)
        assert rec.subjects() == ["hello 5"]
    finally:
        await stop_source(stop, task)


async def test_failed_message_is_retried_by_the_periodic_full_pass(dovecot: Dovecot) -> None:
    attempts: list[int] = []

    def fail_first(m: ImapMessage) -> bool:
        attempts.append(m.uid)
        return len(attempts) == 1

    src = ImapSource(config(dovecot, full_pass_every=0.5))
    rec = Recorder(fail=fail_first)
    stop, task = await run_source(src, rec)
    try:
        await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(1))
        await rec.wait_for(lambda: len(rec.seen) == 2)
    finally:
        await stop_source(stop, task)
    assert attempts == [1, 1]
    assert FLAG in (await flags_of(dovecot))[1]


async def test_bad_login_and_unreachable_server_are_transport_errors(dovecot: Dovecot) -> None:
    bad = ImapConfig(host=dovecot.host, port=dovecot.imap_port, user="alice", password="wrong")
    with pytest.raises(TransportError, match="login refused"):
        await ImapSource(bad).sync_once(Recorder())
    from envelopay.testing.dovecot import free_port

    nowhere = ImapConfig(host="127.0.0.1", port=free_port(), user="alice", password="x")
    with pytest.raises(TransportError, match="connect"):
        await ImapSource(nowhere).sync_once(Recorder())


def test_config_refuses_injection_before_any_io() -> None:
    base = dict(host="127.0.0.1", port=143, user="u", password="p")
    with pytest.raises(ConfigError, match="processed_flag"):
        ImapConfig(**base, processed_flag="$X) (\\Deleted")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="mailbox"):
        ImapConfig(**base, mailbox="INBOX\r\nA1 DELETE INBOX")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="port"):
        ImapConfig(host="h", port=0, user="u", password="p")


def test_parse_fetch_reads_uid_flags_and_literal() -> None:
    lines = [
        b"1 FETCH (UID 7 FLAGS (\\Seen $X) BODY[] {5}",
        bytearray(b"hello"),
        b")",
        b"2 FETCH (BODY[] {3}",
        bytearray(b"abc"),
        b" UID 9 FLAGS ())",
        b"Fetch completed.",
    ]
    assert parse_fetch(lines) == [(7, frozenset({"\\Seen", "$X"}), b"hello"), (9, frozenset(), b"abc")]


async def test_implicit_tls(tmp_path: Path) -> None:
    import ssl

    cert, key = self_signed(tmp_path)
    with running_dovecot(tls_cert=cert, tls_key=key) as server:
        server.deliver("alice", raw_mail(1))
        trusting = ssl.create_default_context(cafile=str(cert))
        cfg = ImapConfig(
            host=server.host,
            port=server.imaps_port,
            user="alice",
            password="secret",
            tls=True,
            ssl_context=trusting,
        )
        rec = Recorder()
        assert await ImapSource(cfg).sync_once(rec) == 1
        assert rec.subjects() == ["hello 1"]
        # The default context does not trust a self-signed certificate: a transport error.
        untrusting = ImapConfig(
            host=server.host, port=server.imaps_port, user="alice", password="secret", tls=True
        )
        with pytest.raises(TransportError):
            await ImapSource(untrusting).sync_once(Recorder())


async def test_consumer_can_ask_for_extra_keywords(dovecot: Dovecot) -> None:
    dovecot.deliver("alice", raw_mail(1))

    async def consumer(msg: ImapMessage) -> Processed:
        return Processed(frozenset({"$EnvelopayMalformed"}))

    assert await ImapSource(config(dovecot)).sync_once(consumer) == 1
    assert (await flags_of(dovecot))[1] >= {FLAG, "$EnvelopayMalformed"}
    with pytest.raises(ConfigError, match="extra_flags"):
        Processed(frozenset({"\\Deleted"}))


async def test_mail_arriving_mid_pass_is_not_left_for_the_periodic_pass(dovecot: Dovecot) -> None:
    """The server announces it inside a STORE/SEARCH answer, which aioimaplib drops; the
    source must still pick it up at once (full_pass_every is 300 s here)."""
    seen: list[bytes] = []

    async def consumer(msg: ImapMessage) -> bool:
        seen.append(msg.raw)
        if len(seen) == 1:  # deliver the next one while this pass is still running
            await asyncio.to_thread(dovecot.deliver, "alice", raw_mail(2))
        return True

    dovecot.deliver("alice", raw_mail(1))
    src = ImapSource(config(dovecot))
    rec = Recorder()

    async def both(msg: ImapMessage) -> bool:
        ok = await consumer(msg)
        await rec(msg)
        return ok

    stop = asyncio.Event()
    task = asyncio.create_task(src.run(both, stop))
    try:
        await rec.wait_for(lambda: len(rec.seen) == 2)
        assert sorted(rec.subjects()) == ["hello 1", "hello 2"]
        assert src.stats.connects == 1
    finally:
        await stop_source(stop, task)
