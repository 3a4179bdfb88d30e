"""Long-running loops: pick mail up from Maildirs and hand each message to a consumer.

`pump` is the one loop every role uses (worker engine, responders, a client's reply
inbox): a message is marked done in the Maildir only AFTER its consumer returned, so a
crash mid-way leaves it in new/ and it is handled again on restart (consumers are
idempotent: the engine claims Message-IDs, responders are stateless, calls settle once).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from envelopay.endpoints.calls import CallClient
from envelopay.endpoints.responders import Responder
from envelopay.endpoints.toolmail import read_tool_mail
from envelopay.errors import TransportError
from envelopay.mail.maildir import Delivery, Pickup
from envelopay.mail.transport import Transport
from envelopay.node.lanes import Lanes, lane_of

__all__ = ["MAIL_CONCURRENCY", "pump", "serve_call_replies", "serve_responders"]

# Returns False (or None is taken as done) to leave a message in new/ for a later start.
Consumer = Callable[[Path, bytes], Awaitable[bool | None]]
log = logging.getLogger(__name__)
# Messages a pump serves at once (`worker serve --mail-concurrency`): enough that a WHICH
# or a new ORDER does not wait behind a burst of PAYs verifying on their chains.
MAIL_CONCURRENCY = 8


async def pump(
    maildirs: Iterable[Path],
    consume: Consumer,
    *,
    stop: asyncio.Event,
    again_after: float = 5.0,
    concurrency: int = MAIL_CONCURRENCY,
) -> None:
    """Feed every message landing in `maildirs` to `consume(maildir, raw)` until `stop`.

    Up to `concurrency` messages are served at once, the messages of one thread (its
    lane, node/lanes.py: the root Message-ID of References, else In-Reply-To, else its
    own) one after another in the order they arrived, so an ORDER is handled before its
    PAY while a WHICH does not wait behind other buyers' PAYs. 1: one at a time.

    A consumer that raises (a bug, never someone's bad input) must not stop the loop:
    the message is logged and filed with the Maildir "F" (flagged) mark instead of "S",
    so an operator can find it and deliver it again once the bug is fixed. A message
    the consumer leaves (False: another worker holds it) is offered again after
    `again_after` seconds, so it is served even if that worker dies holding it. Several
    processes may share one Maildir: the one that moves a file second just moves on.
    Nothing else ends the loop but `stop` (the messages being served are finished, none
    is started after) or cancellation (those being served are cancelled and stay in new/)."""
    if concurrency < 1:
        raise ValueError(f"pump: concurrency must be at least 1, not {concurrency}")
    async with Pickup(list(maildirs)) as pickup:

        async def serve(delivery: Delivery) -> None:
            await _serve_one(pickup, consume, delivery, again_after)

        lanes: Lanes[Delivery] = Lanes(concurrency, serve, stop=stop)
        try:
            while not stop.is_set():
                if not await lanes.room(timeout=0.2):
                    continue
                try:
                    delivery = await pickup.next(timeout=0.2)
                except TimeoutError:
                    continue
                lanes.add(lane_of(delivery.raw), delivery)
            await lanes.finish()
        finally:
            await lanes.cancel()  # nothing left running after a stop; on cancellation, cancelled


async def _serve_one(pickup: Pickup, consume: Consumer, delivery: Delivery, again_after: float) -> None:
    """One message: consumed, then filed in cur/ ("S", or "F" when the consumer raised),
    or left in new/ and offered again later (False)."""
    flags = "S"
    try:
        if await consume(delivery.maildir, delivery.raw) is False:
            log.warning("left %s in new/ for a later attempt", delivery.path)
            pickup.again(delivery, again_after)
            return
    except Exception:
        log.exception("consumer failed on %s; filed as flagged", delivery.path)
        flags = "F"
    try:
        pickup.done(delivery, flags=flags)
    except OSError:
        # The Maildir itself is in trouble (permissions, a full disk): say so and
        # keep serving; the file stays in new/ for the next start.
        log.exception("could not file %s", delivery.path)


async def serve_responders(
    responders: Mapping[Path, Responder],
    transport: Transport,
    *,
    domain: str,
    stop: asyncio.Event,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sign: Callable[[bytes], bytes] | None = None,
) -> None:
    """Answer every request arriving in each responder's Maildir; `sign` (the agent's DKIM
    signer) signs each reply, as every path that sends the agent's mail does."""

    async def consume(maildir: Path, raw: bytes) -> None:
        responder = responders[maildir]
        reply = responder.respond(raw, now=clock(), domain=domain)
        if reply is None:
            return
        rcpt = _reply_to(reply)
        if rcpt is None:
            return
        # A reply that cannot be delivered is dropped: the caller's deadline covers it.
        with contextlib.suppress(TransportError):
            await transport.send(sign(reply) if sign is not None else reply, responder.address, rcpt)

    await pump(responders.keys(), consume, stop=stop)


def _reply_to(reply: bytes) -> str | None:
    return read_tool_mail(reply).recipient


async def serve_call_replies(client: CallClient, maildir: Path, *, stop: asyncio.Event) -> None:
    """Settle outstanding calls from replies landing in the client's Maildir."""

    async def consume(_: Path, raw: bytes) -> None:
        client.on_reply(raw)

    await pump([maildir], consume, stop=stop)
