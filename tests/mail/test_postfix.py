"""Our mail through a real MTA: Debian's Postfix on loopback, LMTP into Dovecot.

    buyer ──SMTP──▶ Postfix ──LMTP──▶ Dovecot ──IMAP IDLE──▶ worker
    buyer ◀─LMTP── Dovecot ◀──LMTP── Postfix ◀──SMTP─────────┘
                               └──SMTP──▶ next hop (far.test: scripted 4xx / 5xx)

Every wait is on a real event (a file in a Maildir, a line in Postfix's log, a reply at
the next hop, an empty queue), never a fixed sleep. Postfix and Dovecot are stopped and
their directories removed after each test.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay import dkim
from envelopay.config import config_from_dict
from envelopay.dkim import dkim_signer
from envelopay.engine.bounces import bounce_of, record_bounce
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit
from envelopay.mail.transport.smtp import SmtpConfig, send_raw
from envelopay.mail.transport.submission import SmtpTransport
from envelopay.node.serve import serve_worker
from envelopay.protocol.compose import compose, compose_message
from envelopay.protocol.messages import Fulfill, Order, Which
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parse import parse
from envelopay.testing.dovecot import running_dovecot
from envelopay.testing.postfix import (
    NextHop,
    Postfix,
    process_alive,
    read_policy_request,
    running_postfix,
    strip_trace,
)

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
README = Path(__file__).resolve().parents[2] / "README.md"
WALLET = "4vJ9JU1bJJE96FWSJKvHsmmFADCg4gpZQff4P3bkLKi"  # [[accept]] is judged by the rail: a Solana key


def readme_block(name: str) -> str:
    """The fenced block right after `<!-- readme:NAME -->` in README.md."""
    text = README.read_text()
    after = text.split(f"<!-- readme:{name} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


@dataclass
class World:
    postfix: Postfix
    dovecot: object  # envelopay.testing.dovecot.Dovecot
    far: NextHop
    worker_key: dkim.DkimKey
    buyer_key: dkim.DkimKey

    def maildir(self, user: str) -> Path:
        return self.dovecot.maildir(user)  # type: ignore[attr-defined, no-any-return]

    def smtp(self) -> SmtpConfig:
        return SmtpConfig("127.0.0.1", self.postfix.port, security="none", max_attempts=1)

    def dns(self) -> dkim.DnsLookup:
        return dkim.table_dns({
            "w._domainkey.worker.test": self.worker_key.dns_txt_record(),
            "b._domainkey.buyer.test": self.buyer_key.dns_txt_record(),
        })


@pytest.fixture
def world() -> Iterator[World]:
    far = NextHop(script={
        "later@far.test": ["451 4.3.0 <later@far.test>: try again later"],
        "gone@far.test": ["550 5.1.1 <gone@far.test>: Recipient address rejected: User unknown"],
    })
    far.start()
    try:
        with running_dovecot({"worker": "secret", "buyer": "secret"}) as dove:
            lmtp = f"lmtp:inet:127.0.0.1:{dove.lmtp_port}"
            routes = {"worker.test": lmtp, "buyer.test": lmtp, "far.test": far.route}
            with running_postfix(routes) as postfix:
                yield World(postfix, dove, far, dkim.DkimKey.generate_ed25519(),
                            dkim.DkimKey.generate_ed25519())
    finally:
        far.stop()


def wait_files(folder: Path, n: int, timeout: float = 60.0) -> list[Path]:
    """The Maildir's messages (new/ and cur/, oldest first) once it holds at least `n`
    (Dovecot's delivery is the event; an IMAP reader moves them to cur/)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [p for sub in ("new", "cur") if (folder / sub).is_dir() for p in (folder / sub).iterdir()]
        if len(files) >= n:
            return sorted(files, key=lambda p: p.name)  # Dovecot names start with the delivery time
        time.sleep(0.02)
    raise TimeoutError(f"{folder}: fewer than {n} messages after {timeout}s")


def outbound(recipient: str, n: int) -> Outbound:
    body = Fulfill(id=f"ful_{n}", order_ref=f"ord_{n}", result={"n": n})
    return Outbound("worker@worker.test", recipient, body, f"<out.{n}@worker.test>", NOW,
                    in_reply_to=f"<in.{n}@buyer.test>",
                    references=(f"<in.{n}@buyer.test>",))


def drainer_for(world: World, store: SqliteStore) -> OutboxDrainer:
    signer = dkim_signer(world.worker_key.private_pem(), selector="w", domain="worker.test",
                         clock=lambda: NOW)
    transport = SmtpTransport(world.smtp(), pool_size=0)  # as the node wires it
    return OutboxDrainer(store, DirectHook(transport, signer), clock=lambda: NOW)


async def test_worker_round_trip_through_postfix(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "worker.pem").write_bytes(world.worker_key.private_pem())
    # README's "Run behind Postfix" block as written, on this test's ports.
    transport = tomllib.loads(readme_block("postfix-config"))["transport"]
    assert (transport["smtp_port"], transport["imap_port"]) == (25, 143)
    transport.update(smtp_port=world.postfix.port, imap_port=world.dovecot.imap_port)  # type: ignore[attr-defined]
    monkeypatch.setenv(transport["imap_password_env"], "secret")
    cfg = config_from_dict({
        "agent": {"address": "worker@worker.test", "domain": "worker.test", "ledger": "w.db",
                  "dkim_selector": "w", "dkim_key": "worker.pem", "dkim_policy": "required"},
        "transport": transport,
        "rails": {"solana": {"backend": "local"}},
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": WALLET}],
        "tasks": [{"name": "digest", "handler": "envelopay.worker.operations:digest",
                   "schema": "envelopay.worker.operations:Digest", "price": "0"}],
        "dkim_records": {"b._domainkey.buyer.test": world.buyer_key.dns_txt_record()},
    }, base_dir=tmp_path)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve_worker(cfg, echo=lambda _: None, stop=stop))
    now = datetime.now(UTC)
    sent = {}
    try:
        for msg in (Which(id="w1"), Order(id="o1", task={"name": "digest", "text": "abc"})):
            raw, mid = compose_message(msg, sender="buyer@buyer.test", recipient="worker@worker.test",
                                       domain="buyer.test", now=now)
            signed = dkim.sign(raw, selector="b", domain="buyer.test", key=world.buyer_key)
            result = await send_raw(signed, sender="buyer@buyer.test", recipient="worker@worker.test",
                                    config=world.smtp())
            assert result.ok, result
            sent[mid] = msg.type
        files = await asyncio.to_thread(wait_files, world.maildir("buyer"), 2)
    finally:
        stop.set()
        await serving
    delivered = [f.read_bytes() for f in files]
    replies = {parse(raw).in_reply_to: (parse(raw), raw) for raw in delivered}
    assert set(replies) == set(sent)
    methods, fulfil = (replies[mid][0] for mid in sent)
    assert methods.type is not None and methods.type.value == "methods" and methods.valid
    assert fulfil.type is not None and fulfil.type.value == "fulfill"
    assert fulfil.body is not None and fulfil.body["result"]["sha256"].startswith("ba7816bf")
    for _, raw in replies.values():
        # Both legs went through Postfix (its Received lines), and the worker's DKIM
        # signature verifies at the far end, under the headers Postfix and Dovecot added.
        assert raw.count(b"(Postfix)") >= 1 and raw.startswith(b"Return-Path: <worker@worker.test>")
        verdict = await dkim.verify(raw, dns=world.dns())
        assert verdict.status == "pass" and verdict.domain == "worker.test"
    # The worker saw the buyer's signature pass after Postfix (its policy requires it).
    worker_copies = [f.read_bytes() for f in wait_files(world.maildir("worker"), 2)]
    for raw in worker_copies:
        assert (await dkim.verify(raw, dns=world.dns())).status == "pass"


async def test_resend_of_an_outbox_row_is_byte_identical_after_postfix(world: World, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    ob = outbound("buyer@buyer.test", 1)
    assert store.commit_step(Commit(ob.sender, NOW, {"status": "sent"}, outbox=((ob, "f1"),))) == "ok"
    drainer = drainer_for(world, store)
    assert (await drainer.drain()).sent == [ob.message_id]
    first = wait_files(world.maildir("buyer"), 1)
    # As after a crash between the hand-off and mark_sent: the row is due again.
    assert store.mark_failed(ob.message_id, NOW, "crash before mark_sent", retry_at=NOW)
    assert (await drainer.drain()).sent == [ob.message_id]
    files = wait_files(world.maildir("buyer"), 2)
    copies = [strip_trace(f.read_bytes()) for f in files]
    assert isinstance(drainer.hook, DirectHook) and drainer.hook.signer is not None
    submitted = strip_trace(drainer.hook.signer(compose(ob)))
    assert copies[0] == copies[1] == submitted
    assert files[0] == first[0]
    assert files[0].read_bytes() != files[1].read_bytes()  # only the trace differs (queue ids)
    store.close()


async def test_next_hop_4xx_is_retried_by_postfix(world: World, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    ob = outbound("later@far.test", 2)
    assert store.commit_step(Commit(ob.sender, NOW, {"status": "sent"}, outbox=((ob, "f2"),))) == "ok"
    drainer = drainer_for(world, store)
    assert (await drainer.drain()).sent == [ob.message_id]  # Postfix took it: ours is done
    # The next hop said 451 once; Postfix kept the message and tried again on its own.
    # Postfix's queue manager may skip the deferred file once ("skipped, still being
    # delivered": it looked while the delivery agent still held it), after which its
    # next scan can be far off on a loaded machine; so once the deferral is logged we
    # also ask for the retry (postqueue -f), again until the next hop has the message.
    world.postfix.wait_log("status=deferred")
    deadline = time.monotonic() + 60
    while True:
        try:
            await asyncio.to_thread(world.far.wait, lambda hop: len(hop.messages) == 1, 2.0)
            break
        except TimeoutError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"not retried\n{world.postfix.log_tail(60)}") from None
            await asyncio.to_thread(world.postfix.flush)
    replies = [r[:3] for a, r in world.far.rcpt_log if a == "later@far.test"]
    assert replies == ["451", "250"]
    deferred = world.postfix.wait_log("to=<later@far.test>")
    assert "status=deferred" in deferred and "451 4.3.0" in deferred
    assert "status=sent" in world.postfix.wait_log("status=sent")
    rcpts, raw = world.far.messages[0]
    assert rcpts == ("later@far.test",)
    assert (await dkim.verify(raw, dns=world.dns())).status == "pass"
    await asyncio.to_thread(world.postfix.wait_queue_empty)
    row = store.outbox_get(ob.message_id)
    assert row is not None and row.status == "sent"
    store.close()


async def test_next_hop_5xx_comes_back_as_a_dsn_recorded_on_the_row(world: World, tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "w.db")
    ob = outbound("gone@far.test", 3)
    other = outbound("buyer@buyer.test", 4)
    commit = Commit("worker@worker.test", NOW, {"status": "sent"}, outbox=((ob, "f3"), (other, "f4")))
    assert store.commit_step(commit) == "ok"
    assert sorted((await drainer_for(world, store).drain()).sent) == sorted([ob.message_id, other.message_id])
    # Postfix's bounce daemon writes a DSN to the envelope sender: worker@worker.test.
    [dsn_file] = wait_files(world.maildir("worker"), 1)
    raw = dsn_file.read_bytes()
    assert parse(raw).protocol is False  # never protocol mail: nothing to answer
    dsn = bounce_of(raw)
    assert dsn is not None and dsn.original_message_id == ob.message_id
    outcome = record_bounce(store, dsn, "worker@worker.test", NOW)
    assert (outcome.verdict, outcome.status) == ("bounced", "5.1.1")
    row = store.outbox_get(ob.message_id)
    assert row is not None and (row.status, row.bounce_status) == ("bounced", "5.1.1")
    assert row.last_error is not None and "User unknown" in row.last_error
    kept = store.outbox_get(other.message_id)
    assert kept is not None and kept.status == "sent" and kept.bounce_status is None
    assert record_bounce(store, dsn, "worker@worker.test", NOW).verdict == "already"
    # The same report claimed for the other row (a forgery) does not match its recipient.
    forged = type(dsn)(dsn.reporting_mta, None, other.message_id, dsn.recipients)
    assert record_bounce(store, forged, "worker@worker.test", NOW).verdict == "recipient_mismatch"
    await asyncio.to_thread(world.postfix.wait_queue_empty)
    store.close()


def test_readme_postfix_recipe_is_the_tested_routing(world: World) -> None:
    # README's main.cf lines name the settings this harness routes with, map type included.
    lines = dict(line.split(" = ", 1) for line in readme_block("postfix-main-cf").splitlines() if line)
    assert set(lines) == {"relay_domains", "transport_maps"}
    assert lines["transport_maps"].startswith("texthash:")
    import subprocess

    got = subprocess.run(["postconf", "-c", str(world.postfix.config_dir), "-h", *lines],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert got[0].split() == ["buyer.test", "far.test", "worker.test"]
    assert got[1].startswith("texthash:")


def test_postfix_refuses_unrouted_domains(world: World) -> None:
    import smtplib

    with smtplib.SMTP("127.0.0.1", world.postfix.port, timeout=30) as s:
        code, _ = s.ehlo()
        assert code == 250
        s.mail("worker@worker.test")
        code, text = s.rcpt("someone@elsewhere.test")
    assert code == 554 and b"Relay access denied" in text
    assert os.path.isdir(world.postfix.queue_dir)


def test_running_postfix_leaves_nothing_behind() -> None:
    with running_postfix({"far.test": "smtp:[127.0.0.1]:9"}) as postfix:
        pid = int((postfix.queue_dir / "pid" / "master.pid").read_text())
        assert process_alive(pid)  # the master runs
        root = postfix.root
    assert not process_alive(pid) and not root.exists()


async def test_worker_records_the_bounce_of_its_reply(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A buyer at far.test asks; the worker's METHODS to it gets 550 at the next hop;
    # Postfix's DSN comes back to the worker over LMTP → Dovecot → IMAP IDLE, and the
    # worker records it on the outbox row, never answering it.
    transport = tomllib.loads(readme_block("postfix-config"))["transport"]
    transport.update(smtp_port=world.postfix.port, imap_port=world.dovecot.imap_port)  # type: ignore[attr-defined]
    monkeypatch.setenv(transport["imap_password_env"], "secret")
    cfg = config_from_dict({
        "agent": {"address": "worker@worker.test", "domain": "worker.test", "ledger": "w.db",
                  "dkim_policy": "prefer"},
        "transport": transport,
        "rails": {"solana": {"backend": "local"}},
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": WALLET}],
        "tasks": [{"name": "digest", "handler": "envelopay.worker.operations:digest",
                   "schema": "envelopay.worker.operations:Digest", "price": "0"}],
    }, base_dir=tmp_path)
    stop = asyncio.Event()
    serving = asyncio.create_task(serve_worker(cfg, echo=lambda _: None, stop=stop))
    raw, mid = compose_message(Which(id="w9"), sender="gone@far.test", recipient="worker@worker.test",
                               domain="far.test", now=datetime.now(UTC))
    assert (await send_raw(raw, sender="gone@far.test", recipient="worker@worker.test",
                           config=world.smtp())).ok
    reader = SqliteStore(tmp_path / "w.db")
    try:
        async with asyncio.timeout(60):
            while True:
                outcome = reader.inbound_outcome("worker@worker.test", mid)
                reply = outcome["outbox"][0] if outcome and outcome.get("outbox") else None
                row = reader.outbox_get(reply) if reply else None
                if row is not None and row.status == "bounced":
                    break
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await serving
    assert row.bounce_status == "5.1.1" and row.outbound.recipient == "gone@far.test"
    assert row.last_error is not None and "User unknown" in row.last_error
    reader.close()
    # The DSN was handled as not-protocol: the worker's only outbox row is its METHODS.
    with sqlite3.connect(tmp_path / "w.db") as db:
        assert db.execute("SELECT count(*) FROM ep_outbox").fetchone() == (1,)
    await asyncio.to_thread(world.postfix.wait_queue_empty)


async def test_a_4xx_from_postfix_to_our_submission_is_retried_by_us(tmp_path: Path) -> None:
    # Postfix itself answers 450 to our first RCPT (its policy service defers it once);
    # our SMTP client retries with its backoff and the row is sent, delivered once.
    asked: list[str] = []

    async def policy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while attrs := await read_policy_request(reader):  # one request per RCPT
            asked.append(attrs.get("recipient", ""))
            action = "DEFER_IF_PERMIT 4.7.1 busy, try later" if len(asked) == 1 else "DUNNO"
            writer.write(f"action={action}\n\n".encode())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(policy, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    restrictions = {"smtpd_recipient_restrictions": f"check_policy_service inet:127.0.0.1:{port}"}
    try:
        with running_dovecot({"buyer": "secret"}) as dove, running_postfix(
            {"buyer.test": f"lmtp:inet:127.0.0.1:{dove.lmtp_port}"}, extra=restrictions
        ) as postfix:
            store = SqliteStore(tmp_path / "w.db")
            ob = outbound("buyer@buyer.test", 5)
            assert store.commit_step(Commit(ob.sender, NOW, {"status": "sent"}, outbox=((ob, "f5"),))) == "ok"
            smtp = SmtpConfig("127.0.0.1", postfix.port, security="none", max_attempts=3,
                              backoff_initial=0.05)
            drainer = OutboxDrainer(store, DirectHook(SmtpTransport(smtp, pool_size=0)), clock=lambda: NOW)
            assert (await drainer.drain()).sent == [ob.message_id]
            [copy] = await asyncio.to_thread(wait_files, dove.maildir("buyer"), 1)
            assert strip_trace(copy.read_bytes()) == strip_trace(compose(ob))
            assert "450 4.7.1" in postfix.wait_log("NOQUEUE: reject: RCPT")
            row = store.outbox_get(ob.message_id)
            assert row is not None and row.status == "sent" and row.attempts == 1
            store.close()
    finally:
        server.close()
        await server.wait_closed()
    assert asked == ["buyer@buyer.test", "buyer@buyer.test"]
