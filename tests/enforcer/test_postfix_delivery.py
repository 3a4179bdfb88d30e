"""The send enforcer's SMTP delivery (mail/transport: submission.SmtpTransport, SmtpEnvelope, smtp_pipe)
against a real private Postfix, LMTP into Dovecot:

    enforcer ──SMTP (pooled, pipelined)──▶ Postfix ──LMTP──▶ Dovecot (seller's Maildir)
                                              └── policy service (scripted 4xx, held verdicts)

What is asserted is what Postfix did: the Maildir files Dovecot wrote, the maillog lines
(queue ids and their `status=sent`, `lost connection after DATA (0 bytes)`, `NOQUEUE:
reject`, `timeout after DATA`, `connect from`) and an empty queue — not what the
deliverer says. Postfix runs strict: `smtpd_forbid_unauth_pipelining`,
`reject_unauth_pipelining` at DATA and `smtpd_forbid_bare_newline = reject` (loopback
included), so an RFC 2920 violation or a bare LF in our DATA phase would be refused.
Each test starts its own Postfix and Dovecot (envelopay.testing.postfix and .dovecot, as
tests/mail/test_postfix.py does) and removes them; the parametrized ones run with
Postfix advertising PIPELINING and without (`smtpd_discard_ehlo_keywords`). A few waits
look inside the envelope (`in_data`: Postfix's 354 has arrived) so that an abort is
known to happen in the DATA phase, the dangerous one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.mail.test_postfix import wait_files

from envelopay import dkim
from envelopay.dkim import dkim_signer
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.errors import TransportError
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpEnvelope, SmtpTransport
from envelopay.protocol.parse import parse
from envelopay.testing.dovecot import Dovecot, running_dovecot
from envelopay.testing.postfix import Postfix, read_policy_request, strip_trace

from .conftest import Clock
from .paykit import USDC, make_kit, pay_req, payee_wallet, proof_tx

SENDER = "buyer@agents.test"
SELLER = "seller@partner.test"  # the one known recipient at partner.test (paykit's PAY goes there)

# Postfix as strict as it can be about how a client talks: an out-of-turn command or a
# bare LF is refused (the loopback exclusion is removed: we are loopback).
STRICT = {
    "smtpd_forbid_unauth_pipelining": "yes",
    "smtpd_data_restrictions": "reject_unauth_pipelining",
    "smtpd_forbid_bare_newline": "reject",
    "smtpd_forbid_bare_newline_exclusions": "",
    # Unknown users at partner.test are refused at RCPT (550 5.1.1), as a real MX does.
    "relay_recipient_maps": f"inline:{{ {SELLER}=ok }}",
}


@dataclass
class Mx:
    postfix: Postfix
    dovecot: Dovecot
    pipelining: bool

    def config(self, **kw: Any) -> SmtpConfig:
        return SmtpConfig("127.0.0.1", self.postfix.port, **{"security": "none", "max_attempts": 1, **kw})

    def deliverer(self, **kw: Any) -> SmtpTransport:
        return SmtpTransport(self.config(), **kw)

    def log(self) -> list[str]:
        return self.postfix.log_path.read_text(errors="replace").splitlines()

    def count(self, needle: str) -> int:
        return sum(needle in line for line in self.log())

    async def logged(self, *ns: int) -> None:
        """Until cleanup has logged messages `ns`. Postfix's daemons log through one
        datagram socket to postlogd, in the order they log: whatever smtpd logged before
        (a `connect from`) is in the file by then."""
        async with asyncio.timeout(60):
            while not all(self.count(f"message-id={mid(n)}") for n in ns):
                await asyncio.sleep(0.02)

    def connections(self) -> int:
        """SMTP sessions Postfix's smtpd saw (less running_postfix's readiness probes)."""
        return self.count(": connect from ") - self.count("lost connection after CONNECT")

    def delivered_ids(self) -> list[str]:
        """The Message-ID of every `status=sent` in the log, one per delivery: Postfix's
        own account (cleanup logs a queue id's Message-ID, lmtp its delivery)."""
        ids: dict[str, str] = {}
        out = []
        for line in self.log():
            if m := re.search(r": ([0-9A-F]+): message-id=(<[^>]*>)", line):
                ids[m[1]] = m[2]
            elif (m := re.search(r": ([0-9A-F]+): to=<[^>]*>.* status=sent ", line)):
                out.append(ids.get(m[1], "?"))
        return out

    def mailbox(self) -> list[Path]:
        folder = self.dovecot.maildir("seller")
        return sorted(p for sub in ("new", "cur") if (folder / sub).is_dir()
                      for p in (folder / sub).iterdir())

    async def quiet(self) -> None:
        """Until every SMTP session Postfix had has ended and its queue is empty: then
        nothing more can arrive (call it after the deliverer's aclose)."""
        async with asyncio.timeout(60):
            while self.count(": disconnect from ") < self.count(": connect from "):
                await asyncio.sleep(0.05)
        await asyncio.to_thread(self.postfix.wait_queue_empty)

    async def settled(self, n: int) -> dict[str, bytes]:
        """The seller's messages by Message-ID once `n` are in and Postfix is quiet:
        exactly `n`, all distinct."""
        if n:
            await asyncio.to_thread(wait_files, self.dovecot.maildir("seller"), n)
        await self.quiet()
        files = self.mailbox()
        assert len(files) == n, (files, self.postfix.log_tail(60))
        got = {str(parse(raw).message_id): raw for raw in (f.read_bytes() for f in files)}
        assert len(got) == n, sorted(got)
        return got

    async def wait_log(self, needle: str) -> str:
        return await asyncio.to_thread(self.postfix.wait_log, needle)

    async def wait_lost(self) -> str:
        """The first `lost connection after MAIL|RCPT|DATA` line (not a readiness probe's)."""
        async with asyncio.timeout(60):
            while True:
                for line in self.log():
                    if re.search(r"lost connection after (MAIL|RCPT|DATA)", line):
                        return line
                await asyncio.sleep(0.05)

    def assert_clean(self) -> None:
        """Postfix saw no protocol violation from us in the whole test."""
        text = "\n".join(self.log())
        assert "improper command pipelining" not in text and "bare <LF>" not in text, text
        assert "SMTP protocol synchronization" not in text


class TlsPostfix(Postfix):
    """The harness's Postfix plus its tlsmgr (PRNG seed, TLS session cache), without
    which smtpd disables TLS ("no entropy for TLS key generation")."""

    def _write_config(self) -> None:
        super()._write_config()
        with (self.config_dir / "master.cf").open("a") as master:
            master.write("tlsmgr    unix  - - n 1000? 1 tlsmgr\n")


@contextmanager
def running_mx(pipelining: bool = True, postfix: type[Postfix] = Postfix, **extra: str) -> Iterator[Mx]:
    settings = {**STRICT, **extra}
    if not pipelining:
        settings["smtpd_discard_ehlo_keywords"] = "pipelining"
    with running_dovecot({"seller": "secret"}) as dove:
        routes = {"partner.test": f"lmtp:inet:127.0.0.1:{dove.lmtp_port}"}
        # As running_postfix does (a fresh directory the daemons can reach), for any class.
        root = Path(tempfile.mkdtemp(prefix="envelopay-postfix-"))
        server = postfix(root, routes, extra=settings)
        try:
            server.start()
            yield Mx(server, dove, pipelining)
        finally:
            server.stop()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=[True, False], ids=["pipelining", "no-pipelining"])
def mx(request: pytest.FixtureRequest) -> Iterator[Mx]:
    with running_mx(bool(request.param)) as world:
        yield world


def mid(n: int) -> str:
    return f"<m{n}@agents.test>"


def message(n: int, body: bytes = b"") -> bytes:
    return (
        f"From: {SENDER}\r\nTo: {SELLER}\r\nSubject: note {n}\r\n"
        f"Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMessage-ID: <m{n}@agents.test>\r\n\r\n"
    ).encode() + (body or f"hello {n}\r\n".encode())


def assert_messages(got: Mapping[str, bytes], *ns: int) -> None:
    """`got` is messages `ns`, each byte for byte as submitted (trace fields aside)."""
    assert sorted(got) == sorted(mid(n) for n in ns)
    for n in ns:
        assert strip_trace(got[mid(n)]) == message(n)


# Leading dots, a lone dot line, bare LF and bare CR, no final CRLF: what the DATA phase
# must escape and normalize (Postfix here refuses a bare LF outright).
ODD = b".leading dot\r\n..two\r\n.\r\nbare LF\nbare CR\rlast line without CRLF"


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Until `condition()` holds (state of a server on this loop); TimeoutError after `timeout`."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


async def in_data(envelope: SmtpEnvelope) -> None:
    """Until Postfix has answered the envelope's DATA with 354 (what deliver() reads
    first): the transaction is then open, waiting for a body."""
    if envelope._task is not None:  # connecting or stepping through the commands
        await asyncio.shield(envelope._task)
        return
    session = envelope._session  # pipelined on a pooled connection: replies are buffered
    assert session is not None
    async with asyncio.timeout(30):
        while b"\n354 " not in b"\n" + bytes(session._replies.buffer):
            await asyncio.sleep(0.01)


async def test_pooled_sends_deliver_byte_identical_messages_over_few_connections(mx: Mx) -> None:
    deliverer = mx.deliverer(pool_size=3)
    try:
        # One after another: one connection carries them all.
        for n in range(4):
            await deliverer.send(message(n), SENDER, SELLER)
        await mx.logged(*range(4))
        assert mx.connections() == 1
        assert len(deliverer._idle) == 1 and deliverer._idle[0].pipelining is mx.pipelining
        # Six at once: new connections as needed, the pool keeps three of them...
        await asyncio.gather(*(deliverer.send(message(n), SENDER, SELLER)
                               for n in range(4, 10)))
        await mx.logged(*range(4, 10))
        opened = mx.connections()
        assert opened == 6 and len(deliverer._idle) == 3  # the pooled one and five new
        # ...and the next three go over those three, opening nothing.
        await asyncio.gather(*(deliverer.send(message(n), SENDER, SELLER)
                               for n in range(10, 13)))
        await mx.logged(*range(10, 13))
        assert mx.connections() == opened
        await deliverer.send(message(13, ODD), SENDER, SELLER)
    finally:
        await deliverer.close()
    by_id = await mx.settled(14)
    assert sorted(by_id) == sorted(mid(n) for n in range(14))
    # What Postfix and Dovecot delivered is what was submitted.
    assert_messages({k: v for k, v in by_id.items() if k != mid(13)}, *range(13))
    # The odd body arrives as aiosmtplib would have carried it: dots unescaped, every line
    # end CRLF (strip_trace normalizes Dovecot's LF back to CRLF).
    odd = strip_trace(by_id[mid(13)]).split(b"\r\n\r\n", 1)[1]
    assert odd == b".leading dot\r\n..two\r\n.\r\nbare LF\r\nbare CR\r\nlast line without CRLF\r\n"
    assert sorted(mx.delivered_ids()) == sorted(by_id)  # once each, by Postfix's own log
    assert mx.count("discarding EHLO keywords: PIPELINING") == (0 if mx.pipelining else mx.connections())
    mx.assert_clean()


async def test_enforcer_signed_sends_verify_after_postfix(tmp_path: Path) -> None:
    key = dkim.DkimKey.generate_rsa()
    clock = Clock(time.time())  # dkimpy refuses a t= in the future
    real = dkim_signer(key, selector="enf", domain="agents.test", clock=clock)
    signed: list[bytes] = []

    def signer(raw: bytes) -> bytes:  # the enforcer's signer, keeping what it returned
        signed.append(real(raw))
        return signed[-1]

    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    with running_mx() as mx:
        deliverer = mx.deliverer()
        enforcer = Enforcer(store, deliverer, signer=signer, clock=clock)
        try:
            _, token = await enforcer.create_agent("buyer", SENDER, allow=("partner.test",))
            for n in range(3):
                d = await enforcer.send(token, {
                    "to": SELLER, "from": SENDER, "type": "which", "in_reply_to": f"<q{n}@partner.test>",
                    "body": {"v": "0.1.0", "note": f"what do you sell? {n}"},
                })
                assert d.status == "sent", d
        finally:
            await deliverer.close()
            await store.close()
        got = await mx.settled(3)
        assert mx.connections() == 1
        dns = dkim.table_dns({"enf._domainkey.agents.test": key.dns_txt_record()})
        assert sorted(strip_trace(raw) for raw in got.values()) == sorted(signed)
        for raw in got.values():  # Postfix's Received and Dovecot's Return-Path on top, still valid
            assert raw.count(b"(Postfix)") == 1 and raw.startswith(b"Return-Path: <buyer@agents.test>")
            verdict = await dkim.verify(raw, dns=dns)
            assert verdict.status == "pass" and verdict.domain == "agents.test", verdict
        mx.assert_clean()


async def test_an_aborted_envelope_delivers_nothing_and_the_pool_goes_on(mx: Mx) -> None:
    deliverer = mx.deliverer()
    try:
        # Two pooled connections: the abort takes one, the next message the other.
        await asyncio.gather(*(deliverer.send(message(n), SENDER, SELLER)
                               for n in (1, 2)))
        await mx.logged(1, 2)
        assert len(deliverer._idle) == 2 and mx.connections() == 2
        envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
        assert envelope is not None
        await in_data(envelope)
        envelope.abort()
        # Postfix saw the transaction end inside DATA, before a single byte of body.
        await mx.wait_log("lost connection after DATA (0 bytes)")
        await deliverer.send(message(3), SENDER, SELLER)
        await mx.logged(3)
        assert mx.connections() == 2  # over the other pooled connection
        with pytest.raises(RuntimeError):
            await envelope.send_body(message(4))  # aborted is used: it never sends
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(3), 1, 2, 3)
    assert sorted(mx.delivered_ids()) == [mid(1), mid(2), mid(3)]
    assert mx.count("lost connection after DATA") == 1
    mx.assert_clean()


@dataclass
class Policy:
    """A Postfix policy service (check_policy_service) on the test's loop: answers each
    RCPT with the next of `actions` (then DUNNO), only once `gate` is set; at the end of
    a message (smtpd_end_of_data_restrictions) DUNNO, the `hold_eod`-th time (counting
    from 1) only once `eod_gate` is set."""

    actions: list[str] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    asked: list[str] = field(default_factory=list)  # the recipient of every RCPT asked about
    eod_gate: asyncio.Event = field(default_factory=asyncio.Event)
    hold_eod: int = 0
    eods: int = 0  # end-of-message requests seen
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while attrs := await read_policy_request(reader):  # one request per RCPT (and end of data)
            if attrs.get("protocol_state") == "END-OF-MESSAGE":
                self.eods += 1
                if self.eods == self.hold_eod:
                    await self.eod_gate.wait()
                action = "DUNNO"
            else:
                self.asked.append(attrs.get("recipient", ""))
                await self.gate.wait()
                action = self.actions.pop(0) if self.actions else "DUNNO"
            writer.write(f"action={action}\n\n".encode())
            await writer.drain()
        writer.close()

    @property
    def restriction(self) -> Mapping[str, str]:
        return {"smtpd_recipient_restrictions": f"check_policy_service inet:127.0.0.1:{self.port}"}

    @property
    def eod_restriction(self) -> Mapping[str, str]:
        return {"smtpd_end_of_data_restrictions": f"check_policy_service inet:127.0.0.1:{self.port}"}


@pytest.fixture
async def policy() -> AsyncIterator[Policy]:
    p = Policy()
    p.gate.set()
    server = await asyncio.start_server(p.serve, "127.0.0.1", 0)
    p.port = server.sockets[0].getsockname()[1]
    yield p
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelining", "no-pipelining"])
async def test_a_delivery_cancelled_before_its_body_delivers_nothing(
    policy: Policy, pipelining: bool
) -> None:
    with running_mx(pipelining, **policy.restriction) as mx:
        deliverer = mx.deliverer()
        try:
            await deliverer.send(message(1), SENDER, SELLER)
            # Postfix now waits for the policy service before it answers the RCPT: the
            # delivery is mid-transaction (its MAIL FROM and RCPT TO written) when its
            # task is cancelled.
            policy.gate.clear()
            task = asyncio.ensure_future(deliverer.send(message(2), SENDER, SELLER))
            await until(lambda: len(policy.asked) == 2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert deliverer._idle == []  # that connection is closed, not pooled
            policy.gate.set()  # Postfix gets its answer, then finds the client gone
            await mx.wait_lost()
            await deliverer.send(message(3), SENDER, SELLER)
        finally:
            await deliverer.close()
        assert_messages(await mx.settled(2), 1, 3)
        assert sorted(mx.delivered_ids()) == [mid(1), mid(3)]
        assert policy.asked == [SELLER] * 3
        lost = [line for line in mx.log() if "lost connection after" in line and "CONNECT" not in line]
        assert len(lost) == 1 and ("after DATA (0 bytes)" in lost[0] or "after RCPT" in lost[0]), lost
        mx.assert_clean()


# A process holding an open envelope (its 354 received) that is then killed: the kernel
# closes its socket, nothing of the body was written.
CHILD = """
import asyncio, sys
from envelopay.mail.transport.submission import SmtpTransport
from envelopay.mail.transport.smtp import SmtpConfig

async def main() -> None:
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", int(sys.argv[1]), security="none", max_attempts=1))
    envelope = deliverer.open_envelope(sender=sys.argv[2], recipient=sys.argv[3])
    await envelope._task  # connected, MAIL FROM, RCPT TO, DATA: 354
    print("in data", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_process_killed_with_an_open_envelope_delivers_nothing(mx: Mx) -> None:
    deliverer = mx.deliverer()
    try:
        await deliverer.send(message(1), SENDER, SELLER)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(mx.postfix.port), SENDER, SELLER],
                                 stdout=subprocess.PIPE, env=os.environ.copy())
        try:
            assert child.stdout is not None
            line = await asyncio.to_thread(child.stdout.readline)
            assert line == b"in data\n"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            if child.stdout is not None:
                child.stdout.close()
        await mx.wait_log("lost connection after DATA (0 bytes)")
        # Our pooled connection was never touched: the next message goes over it.
        await deliverer.send(message(2), SENDER, SELLER)
        await mx.logged(2)
        assert mx.connections() == 2  # ours and the killed process's
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(2), 1, 2)
    assert sorted(mx.delivered_ids()) == [mid(1), mid(2)]
    mx.assert_clean()


async def test_a_dropped_connection_under_an_open_envelope_delivers_once(mx: Mx) -> None:
    deliverer = mx.deliverer()
    try:
        await deliverer.send(message(1), SENDER, SELLER)
        envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
        assert envelope is not None
        await in_data(envelope)
        assert envelope._session is not None
        envelope._session.transport.abort()  # a reset under the open transaction (no FIN, no QUIT)
        await mx.wait_log("lost connection after DATA (0 bytes)")
        await envelope.send_body(message(2))  # falls back to a fresh connection
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(2), 1, 2)
    assert sorted(mx.delivered_ids()) == [mid(1), mid(2)]
    assert mx.connections() == 2
    mx.assert_clean()


async def test_an_envelope_held_below_hold_is_delivered_once_on_its_connection(mx: Mx) -> None:
    deliverer = mx.deliverer(hold=30.0)
    try:
        await deliverer.send(message(1), SENDER, SELLER)
        envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
        assert envelope is not None
        await in_data(envelope)
        await asyncio.sleep(2.0)  # a slow payment: Postfix waits in DATA (smtpd_timeout 300 s)
        await envelope.send_body(message(2))
        assert len(deliverer._idle) == 1  # the connection went back to the pool
        await deliverer.send(message(3), SENDER, SELLER)
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(3), 1, 2, 3)
    assert sorted(mx.delivered_ids()) == [mid(1), mid(2), mid(3)]
    assert mx.connections() == 1
    assert mx.count("lost connection") == mx.count("lost connection after CONNECT")  # probes only
    mx.assert_clean()


async def test_a_body_later_than_hold_abandons_the_transaction_and_goes_fresh_once(mx: Mx) -> None:
    deliverer = mx.deliverer(hold=0.5)
    try:
        await deliverer.send(message(1), SENDER, SELLER)
        envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
        assert envelope is not None
        await in_data(envelope)
        await asyncio.sleep(1.0)  # past `hold`
        await envelope.send_body(message(2))
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(2), 1, 2)
    assert sorted(mx.delivered_ids()) == [mid(1), mid(2)]
    assert mx.count("lost connection after DATA (0 bytes)") == 1  # the abandoned one
    assert mx.connections() == 2
    mx.assert_clean()


REFUSED = {
    "nobody@partner.test": "550 5.1.1",  # unknown user (relay_recipient_maps)
    "someone@elsewhere.test": "554 5.7.1",  # relay access denied
}


async def test_a_5xx_at_rcpt_is_final_and_delivers_nothing(mx: Mx) -> None:
    deliverer = mx.deliverer()
    try:
        for n, (recipient, reply) in enumerate(REFUSED.items()):
            await deliverer.send(message(10 * n), SENDER, SELLER)
            # On the pooled connection (pipelined when offered), then on a new one.
            for _ in range(2):
                with pytest.raises(TransportError) as refused:
                    await deliverer.send(message(10 * n + 1), SENDER, recipient)
                assert "permanent" in str(refused.value) and reply in str(refused.value)
                assert deliverer._idle == []
        await deliverer.send(message(2), SENDER, SELLER)
    finally:
        await deliverer.close()
    assert_messages(await mx.settled(3), 0, 10, 2)
    assert sorted(mx.delivered_ids()) == sorted([mid(0), mid(10), mid(2)])
    # Refused once per attempt: no fresh-path retry after a 5xx.
    rejects = [line for line in mx.log() if "NOQUEUE: reject: RCPT" in line]
    assert len(rejects) == 4, rejects
    for recipient, reply in REFUSED.items():
        assert sum(reply in line and f"to=<{recipient}>" in line for line in rejects) == 2
    mx.assert_clean()


async def test_a_5xx_at_the_end_of_the_message_is_final_and_a_4xx_falls_back() -> None:
    # ($$ is a literal $ in main.cf.)
    checks = ("regexp:{{/^Subject: note 2$$/ REJECT 5.7.1 not this one},"
              " {/^Subject: note 3$$/ REJECT 4.7.1 not now}}")
    with running_mx(header_checks=checks) as mx:
        deliverer = SmtpTransport(mx.config(max_attempts=2, backoff_initial=0.05))
        try:
            await deliverer.send(message(1), SENDER, SELLER)
            with pytest.raises(TransportError) as refused:
                await deliverer.send(message(2), SENDER, SELLER)
            assert "permanent" in str(refused.value) and "550 5.7.1" in str(refused.value)
            # A 4xx verdict on the message: the pooled try and both fresh tries.
            await deliverer.send(message(4), SENDER, SELLER)  # warm again
            with pytest.raises(TransportError) as deferred:
                await deliverer.send(message(3), SENDER, SELLER)
            assert "temporary_failure 451: 4.7.1 not now" in str(deferred.value)
        finally:
            await deliverer.close()
        await mx.quiet()
        assert sorted(mx.delivered_ids()) == [mid(1), mid(4)]
        assert_messages(await mx.settled(2), 1, 4)
        assert mx.count("reject: header Subject: note 2") == 1  # no second try after the 5xx
        assert mx.count("reject: header Subject: note 3") == 3
        mx.assert_clean()


@pytest.mark.parametrize("pool_size", [8, 0], ids=["pooled", "fresh-only"])
async def test_a_verdict_slower_than_our_timeout_is_not_delivered_twice(
    policy: Policy, pool_size: int
) -> None:
    # Postfix has the whole message and the final dot, then takes its time to answer (a
    # milter, a content filter, here its end-of-data policy check) — longer than our reply
    # timeout, far less than the 10 minutes RFC 5321 4.5.3.2.6 gives the final reply. The
    # message is then Postfix's: it will be delivered whatever we do next, so a second
    # copy sent on a fresh connection is a duplicate. (fresh-only: aiosmtplib's path with
    # max_attempts=1, the reference: one copy, reported as a temporary failure.)
    policy.gate.set()
    with running_mx(**policy.eod_restriction) as mx:
        deliverer = SmtpTransport(mx.config(timeout=2.0), pool_size=pool_size)
        try:
            await deliverer.send(message(1), SENDER, SELLER)
            policy.hold_eod = 2
            task = asyncio.ensure_future(deliverer.send(message(2), SENDER, SELLER))
            await until(lambda: policy.eods == 2)  # the first copy is in, its verdict held
            # A resend (its own end-of-data check) or twice our reply timeout, whichever
            # comes first; then Postfix gets its verdict for the first copy.
            with contextlib.suppress(TimeoutError):
                await until(lambda: policy.eods == 3, timeout=4.0)
            policy.eod_gate.set()
            with contextlib.suppress(TransportError):  # an unknown outcome may be reported
                await task
        finally:
            policy.eod_gate.set()
            await deliverer.close()
        await mx.quiet()
        assert sorted(mx.delivered_ids()) == [mid(1), mid(2)], mx.postfix.log_tail(60)
        assert_messages(await mx.settled(2), 1, 2)


@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelining", "no-pipelining"])
async def test_a_4xx_at_rcpt_falls_back_to_the_fresh_path_and_delivers_once(
    policy: Policy, pipelining: bool
) -> None:
    with running_mx(pipelining, **policy.restriction) as mx:
        deliverer = mx.deliverer()
        try:
            await deliverer.send(message(1), SENDER, SELLER)
            # Postfix answers 450 to the pooled attempt; the fresh path's try is accepted.
            policy.actions = ["DEFER_IF_PERMIT 4.7.1 busy, try later"]
            await deliverer.send(message(2), SENDER, SELLER)
            # Deferred on the pooled attempt and on every fresh try (max_attempts=1):
            # a temporary TransportError, nothing delivered.
            policy.actions = ["DEFER_IF_PERMIT 4.7.1 busy, try later"] * 2
            with pytest.raises(TransportError) as deferred:
                await deliverer.send(message(3), SENDER, SELLER)
            assert "temporary_failure 450" in str(deferred.value) and "busy, try later" in str(deferred.value)
            assert policy.actions == []
        finally:
            await deliverer.close()
        assert_messages(await mx.settled(2), 1, 2)
        assert sorted(mx.delivered_ids()) == [mid(1), mid(2)]
        rejects = [line for line in mx.log() if "NOQUEUE: reject: RCPT" in line]
        assert len(rejects) == 3 and all("450 4.7.1" in line for line in rejects)
        assert policy.asked == [SELLER] * 5
        mx.assert_clean()


@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelining", "no-pipelining"])
async def test_postfix_timing_out_a_held_envelope_and_an_idle_connection_delivers_once(
    pipelining: bool,
) -> None:
    with running_mx(pipelining, smtpd_timeout="3s") as mx:
        deliverer = mx.deliverer(hold=60.0)  # our hold outlasts Postfix's patience
        try:
            await deliverer.send(message(1), SENDER, SELLER)
            envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
            assert envelope is not None
            await in_data(envelope)
            # Postfix gives up on the body: 421 and the connection closed, nothing queued.
            await mx.wait_log("timeout after DATA (0 bytes)")
            await envelope.send_body(message(2))  # the fresh path, once
            # The connection that carried it idles in the pool until Postfix drops it too.
            assert len(deliverer._idle) == 0  # the fresh path does not pool
            await deliverer.send(message(3), SENDER, SELLER)
            assert len(deliverer._idle) == 1
            await mx.wait_log("timeout after END-OF-MESSAGE")
            await deliverer.send(message(4), SENDER, SELLER)
        finally:
            await deliverer.close()
        assert_messages(await mx.settled(4), 1, 2, 3, 4)
        assert sorted(mx.delivered_ids()) == [mid(1), mid(2), mid(3), mid(4)]
        assert mx.count("timeout after DATA") == 1 and mx.count("timeout after END-OF-MESSAGE") == 1
        mx.assert_clean()


async def test_pay_then_send_goes_through_postfix_once(tmp_path: Path) -> None:
    key = dkim.DkimKey.generate_ed25519()
    clock = Clock(time.time())
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    with running_mx() as mx:
        deliverer = mx.deliverer()
        signer = dkim_signer(key, selector="enf", domain="agents.test", clock=clock)
        kit = await make_kit(Enforcer(store, deliverer, signer=signer, clock=clock))
        try:
            token, address = await kit.agent(usdc=3 * USDC)
            to = payee_wallet()
            paid = await kit.payments.submit("pay", token, pay_req(to, USDC, key="a"))
            assert paid.status == "paid_and_sent", paid
            # The rail refuses the next one after its envelope was opened on the pooled
            # connection: Postfix sees that transaction end in DATA with no body.
            failed = await kit.payments.submit("pay", token, pay_req(to, 5 * USDC, key="b"))
            assert (failed.status, failed.code) == ("failed", "insufficient_funds"), failed
            await mx.wait_lost()  # after MAIL, RCPT or DATA: the refusal may beat Postfix
            again = await kit.payments.submit("pay", token, pay_req(to, USDC, key="c"))
            assert again.status == "paid_and_sent", again
        finally:
            await deliverer.close()
            await store.close()
        got = await mx.settled(2)
        assert sorted(mx.delivered_ids()) == sorted([paid.message_id, again.message_id])
        dns = dkim.table_dns({"enf._domainkey.agents.test": key.dns_txt_record()})
        for d in (paid, again):
            raw = got[str(d.message_id)]
            parsed = parse(raw)
            assert parsed.valid and parsed.message_id == d.message_id, parsed
            assert proof_tx(dict(parsed.body or {})["proof"]) == d.tx_id
            assert (await dkim.verify(raw, dns=dns)).status == "pass"
        assert sorted(kit.payment_txs(address)) == sorted([paid.tx_id, again.tx_id])
        lost = [line for line in mx.log() if re.search(r"lost connection after (MAIL|RCPT|DATA)", line)]
        assert len(lost) == 1 and ("after DATA" not in lost[0] or "(0 bytes)" in lost[0]), lost
        mx.assert_clean()


async def test_pooled_pipelined_sends_over_starttls() -> None:
    # Submission as deployed: Postfix requires STARTTLS; the pooled connection carries the
    # pipelined transactions inside TLS (the session takes over aiosmtplib's TLS transport).
    import ssl

    from envelopay.testing.tls import self_signed

    certs = Path(tempfile.mkdtemp(prefix="envelopay-tls-"))
    try:
        os.chmod(certs, 0o755)
        cert, key = self_signed(certs)
        tls = {"smtpd_tls_security_level": "encrypt", "smtpd_tls_cert_file": str(cert),
               "smtpd_tls_key_file": str(key), "smtpd_tls_loglevel": "1"}
        with running_mx(postfix=TlsPostfix, **tls) as mx:
            context = ssl.create_default_context(cafile=str(cert))
            deliverer = SmtpTransport(mx.config(security="starttls", tls_context=context))
            try:
                for n in range(3):
                    await deliverer.send(message(n), SENDER, SELLER)
                [session] = deliverer._idle
                assert session.pipelining and session.transport.get_extra_info("ssl_object") is not None
                envelope = deliverer.open_envelope(sender=SENDER, recipient=SELLER)
                assert envelope is not None
                await in_data(envelope)
                envelope.abort()
                await mx.wait_log("lost connection after DATA (0 bytes)")
                await deliverer.send(message(3), SENDER, SELLER)
            finally:
                await deliverer.close()
            got = await mx.settled(4)
            assert_messages(got, 0, 1, 2, 3)
            assert sorted(mx.delivered_ids()) == [mid(0), mid(1), mid(2), mid(3)]
            assert all(b"with ESMTPS id" in raw for raw in got.values())  # Postfix's Received: TLS
            assert mx.connections() == 2 and mx.count("Anonymous TLS connection established") == 2
            mx.assert_clean()
    finally:
        shutil.rmtree(certs, ignore_errors=True)
