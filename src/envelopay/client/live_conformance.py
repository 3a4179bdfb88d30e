"""`envelopay conformance --target ADDRESS`: the corpus against a live endpoint.

Each request vector of fixtures/conformance is sent to ADDRESS over the configured
transport as a fresh message from us (From, To and Message-ID rewritten, re-signed with
our DKIM key, threading headers dropped), and the replies are judged:

- a message the corpus says is broken (expected `oops` code, any type but OOPS)
  → an OOPS carrying exactly that code, threaded to our message (silence is accepted
  only when the vector has no single From: there is nobody to answer);
- not protocol mail, or an OOPS → silence ("never answer an OOPS with an OOPS");
- a valid WHICH → METHODS;
- any other valid message → silence, or a valid protocol reply threaded to ours that
  does not call the message malformed (no invalid_json, missing_field, type_mismatch,
  unsupported_version, unknown_type).

The corpus reuses protocol ids across vectors; a receiver with replay protection would
rightly answer a reused (sender, id) as a retransmission, so a reused id is rewritten
to a fresh one where the body spells it literally. Vectors that need parse options the
target cannot be told (e.g. the v0.2 Re: rule), or whose reused id sits in an encoded
body, are skipped and counted. The last line is `N passed, N failed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.config import load_config
from envelopay.errors import ConfigError, TransportError, UsageError
from envelopay.mail.addresses import Address, parse_address, require_address
from envelopay.mail.maildir import Pickup, mailbox_path
from envelopay.protocol.parse import parse
from envelopay.protocol.parsed import Parsed
from envelopay.testing.conformance import load_manifest

__all__ = ["Verdict", "judge", "prepare", "run_live", "run_live_async"]

_DROP = {b"dkim-signature", b"in-reply-to", b"references", b"return-path", b"delivered-to", b"cc"}
_ENCODED = re.compile(rb"content-transfer-encoding:\s*(base64|quoted-printable)", re.IGNORECASE)
MALFORMED = {"invalid_json", "missing_field", "type_mismatch", "unsupported_version", "unknown_type"}


def _split(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes, bytes]:
    """Header fields (name, whole field incl. folded lines), the separator and the body."""
    nl = b"\r\n" if b"\r\n" in raw[:2000] else b"\n"
    head, sep, body = raw.partition(nl + nl)
    fields: list[tuple[bytes, bytes]] = []
    for line in head.split(nl):
        if line[:1] in (b" ", b"\t") and fields:
            name, text = fields[-1]
            fields[-1] = (name, text + nl + line)
        else:
            fields.append((line.split(b":", 1)[0].strip().lower(), line))
    return fields, sep or nl + nl, body


def _from_ok(text: bytes) -> bool:
    value = text.split(b":", 1)[1].strip().decode("ascii", "replace") if b":" in text else ""
    return isinstance(parse_address(value, allow_display_name=True), Address)


def replyable(raw: bytes) -> bool:
    """Exactly one From holding exactly one address: someone a receiver can answer."""
    fields, _, _ = _split(raw)
    froms = [text for name, text in fields if name == b"from"]
    return len(froms) == 1 and _from_ok(froms[0])


def reuse_id(raw: bytes, old: str, new: str) -> bytes | None:
    """Give the body's protocol id a fresh value where it is written literally (a JSON
    part in 7bit or 8bit); None when it is not (base64, quoted-printable, HTML)."""
    if _ENCODED.search(raw):
        return None  # a copy of the id may sit in an encoded part we cannot rewrite
    out = raw
    for spelling in (f'"id": "{old}"', f'"id":"{old}"'):
        out = out.replace(spelling.encode(), spelling.replace(old, new).encode())
    return out if out != raw else None


def prepare(raw: bytes, *, sender: str, target: str, message_id: str) -> bytes:
    """The vector as a fresh message from us to the target. Address and id headers are
    rewritten one for one, so a vector's duplicated header stays duplicated."""
    fields, sep, body = _split(raw)
    nl = sep[: len(sep) // 2]
    out: list[bytes] = []
    mids = 0
    for name, text in fields:
        if name in _DROP:
            continue
        if name == b"from":
            # An unanswerable From stays as it is: that is what the vector tests.
            out.append(f"From: {sender}".encode() if _from_ok(text) else text)
        elif name == b"to":
            out.append(f"To: {target}".encode())
        elif name == b"message-id":
            out.append(f"Message-ID: {message_id if mids == 0 else message_id.replace('@', '.2@')}".encode())
            mids += 1
        else:
            out.append(text)
    if not any(name == b"to" for name, _ in fields):
        out.insert(0, f"To: {target}".encode())
    if mids == 0:
        out.append(f"Message-ID: {message_id}".encode())
    return nl.join(out) + sep + body


@dataclass(frozen=True, slots=True)
class Verdict:
    file: str
    ok: bool
    detail: str = ""


def judge(file: str, expect: Mapping[str, Any], single_from: bool, reply: Parsed | None) -> Verdict:
    kind = expect.get("type")
    code = expect.get("oops")
    if not expect.get("protocol") or kind == "oops":
        if reply is None:
            return Verdict(file, True)
        return Verdict(file, False, f"expected silence, got {reply.subject!r}")
    if code is not None:
        if reply is None:
            return Verdict(file, not single_from, f"expected OOPS {code}, got silence")
        got = reply.body.get("error", {}).get("code") if isinstance(reply.body, dict) else None
        if reply.type is None or reply.type.value != "oops" or got != code:
            return Verdict(file, False, f"expected OOPS {code}, got {reply.subject!r} code {got}")
        return Verdict(file, True)
    if kind == "which":
        if reply is None or reply.type is None or reply.type.value != "methods" or not reply.valid:
            return Verdict(file, False, f"expected METHODS, got {reply.subject if reply else 'silence'!r}")
        return Verdict(file, True)
    if reply is None:
        return Verdict(file, True)
    if not reply.valid:
        return Verdict(file, False, f"reply is not valid protocol mail: {reply.oops}")
    got = reply.body.get("error", {}).get("code") if isinstance(reply.body, dict) else None
    if reply.type is not None and reply.type.value == "oops" and got in MALFORMED:
        return Verdict(file, False, f"a valid message was called malformed: OOPS {got}")
    return Verdict(file, True)


Sender = Callable[[bytes, str, str], Any]


async def run_live_async(
    vectors: Iterable[Any],
    *,
    sender: str,
    target: str,
    domain: str,
    send: Sender,
    maildir: Path,
    sign: Callable[[bytes], bytes] | None = None,
    timeout: float = 60.0,
    grace: float = 1.0,
    echo: Callable[[str], Any] = print,
) -> tuple[list[Verdict], int]:
    """Send every vector, collect replies by In-Reply-To, judge. Returns (verdicts, skipped)."""
    # lazy: keeps cryptography off this module's import
    from envelopay.mail.transport import DeliveryRefused

    sent: dict[str, tuple[Any, bool]] = {}
    refused: list[Verdict] = []
    skipped = 0
    used_ids: set[str] = set()
    replies: dict[str, Parsed] = {}
    async with Pickup([maildir]) as pickup:
        for v in vectors:
            if v.options:
                skipped += 1
                continue
            raw = v.raw()
            pid = v.expect.get("id")
            if isinstance(pid, str) and pid in used_ids:
                # The corpus reuses ids across vectors; a receiver with replay protection
                # rightly treats a reused (sender, id) as a retransmission or duplicate.
                fresh = reuse_id(raw, pid, f"{pid}-r{len(sent)}")
                if fresh is None:
                    skipped += 1
                    continue
                raw = fresh
            if isinstance(pid, str):
                used_ids.add(pid)
            mid = f"<conf.{secrets.token_hex(8)}@{domain}>"
            msg = prepare(raw, sender=sender, target=target, message_id=mid)
            if sign is not None:
                with contextlib.suppress(Exception):  # a vector dkim cannot sign goes unsigned
                    msg = sign(msg)
            try:
                await send(msg, sender, target)
            except DeliveryRefused as exc:
                # A garden that authenticates its senders refuses a header block the shared
                # reader cannot read (no From to check): a structured answer, before the
                # target. Right for a vector the corpus calls invalid, wrong for any other.
                refused.append(Verdict(v.file, v.expect.get("valid") is False, f"refused in transit: {exc}"))
                continue
            sent[mid] = (v, replyable(raw))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def waiting() -> bool:
            return any(_expects_reply(v.expect, one) and mid not in replies for mid, (v, one) in sent.items())

        quiet_until = loop.time() + grace
        while loop.time() < deadline and (waiting() or loop.time() < quiet_until):
            try:
                d = await pickup.next(timeout=0.1)
            except TimeoutError:
                continue
            parsed = parse(d.raw)
            if parsed.in_reply_to in sent:
                replies.setdefault(parsed.in_reply_to, parsed)
            pickup.done(d, flags="S")
    verdicts = [judge(v.file, v.expect, single, replies.get(mid)) for mid, (v, single) in sent.items()]
    verdicts += refused
    for verdict in verdicts:
        if not verdict.ok:
            echo(f"FAIL {verdict.file}: {verdict.detail}")
    return verdicts, skipped


def _expects_reply(expect: Mapping[str, Any], single_from: bool) -> bool:
    if not expect.get("protocol") or expect.get("type") == "oops":
        return False
    if expect.get("oops") is not None:
        return single_from
    return expect.get("type") == "which"


def run_live(target: str, config: str, *, timeout: float = 120.0, echo: Callable[[str], Any] = print) -> int:
    """`envelopay conformance --target` (exit code: 0 all passed, 1 some failed, 2 bad input)."""
    # lazy: keeps cryptography off this module's import
    from envelopay.dkim import dkim_signer
    from envelopay.node.agent_node import garden_transport

    try:
        to = require_address(target, field="--target").lower()
        cfg = load_config(config)
        transport = garden_transport(cfg)
    except (UsageError, ConfigError) as exc:
        echo(f"error: {exc}")
        return 2
    sign = None
    if cfg.agent.dkim_key:
        sign = dkim_signer(cfg.path(cfg.agent.dkim_key).read_bytes(), selector=cfg.agent.dkim_selector,
                           domain=cfg.agent.domain, clock=lambda: datetime.now(UTC))
    maildir = mailbox_path(cfg.path(cfg.transport.garden_root), cfg.agent.address)

    async def main() -> tuple[list[Verdict], int]:
        try:
            return await run_live_async(
                load_manifest(), sender=cfg.agent.address, target=to, domain=cfg.agent.domain,
                send=transport.send, maildir=maildir, sign=sign, timeout=timeout, echo=echo,
            )
        finally:
            await transport.close()

    try:
        verdicts, skipped = asyncio.run(main())
    except TransportError as exc:
        echo(f"error: transport: {exc}")
        return 2
    passed = sum(v.ok for v in verdicts)
    if skipped:
        echo(f"skipped {skipped} vector(s): parse options the target cannot be told, or a reused id "
             "that cannot be rewritten in an encoded body")
    echo(f"{passed} passed, {len(verdicts) - passed} failed")
    return 0 if passed == len(verdicts) else 1


