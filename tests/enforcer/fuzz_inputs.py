"""A seeded generator of hostile /v1/send bodies for the enforcer fuzz test: mutations of
a valid request (every field given every JSON type, control characters, CR/LF, lone
surrogates, encoded-words, long strings), deep nesting, long numbers, duplicate keys,
invalid UTF-8 and raw bytes. A small share are valid sends (to the allowlisted peer,
or queued for approval), so the caps are exercised too."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

PEER = "bob@partner.test"
STRANGER = "carol@elsewhere.test"
SENDER = "fz@agents.test"

_STRINGS = [
    "", " ", "hello", "a\r\nBcc: victim@evil.test", "\x00", "\x7f", "\udcff", "\ud800x", "caf\u00e9",
    "=?utf-8?q?hi=0D=0ABcc:_v@evil.test?=", "=?utf-8?q?caf=C3=A9?=", "<x@agents.test>", "<no-at>",
    "bob@partner.test", "bob@partner.test, eve@evil.test", "Bob <bob@partner.test>", "@", "x" * 901,
    "\u202e", "PAY", "which", "0.1.0", "{", "}", "\\", '"', "\t", "\n", "💸",
]
_FIELDS = ["to", "from", "subject", "text", "type", "body", "in_reply_to", "references", "reply_to",
           "message_id", "raw", "headers", "cc", "agent", "amount"]
_TYPES = ["which", "methods", "order", "invoice", "pay", "fulfill", "oops", "offer", "accept", "nope", "PAY"]


def _value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.35:
        s = rng.choice(_STRINGS)
        return s * rng.randint(1, 3) if rng.random() < 0.2 else s
    if roll < 0.45:
        return rng.choice([0, -1, 1, 2**63, 10**30, 1.5, -0.0, 1e308])
    if roll < 0.5:
        return rng.choice([None, True, False])
    if roll < 0.6:
        return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 12)))
    if roll < 0.8 and depth < 4:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 4:
        keys = [*_FIELDS, "v", "id", "type"]
        return {rng.choice(keys): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return "leaf"


def _protocol_body(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(_TYPES)
    body: dict[str, Any] = {"v": rng.choice(["0.1.0", "0.2.0", "9.9", 1]), "type": kind.lower()}
    for key in rng.sample(["id", "note", "amount", "token", "chain", "proof", "wallet", "task", "code"],
                          rng.randint(0, 4)):
        body[key] = _value(rng)
    return body


def _base(rng: random.Random, serial: int) -> dict[str, Any]:
    return {"to": PEER, "from": SENDER, "subject": f"hello {serial}", "text": f"body {serial}"}


def _mutated(rng: random.Random, serial: int) -> dict[str, Any]:
    # Mostly to a recipient off the allowlist: what survives the mutations is queued
    # (store writes, no SMTP), which keeps the run fast; a tenth go to the peer.
    obj = {**_base(rng, serial), "to": PEER if rng.random() < 0.1 else STRANGER}
    if rng.random() < 0.3:
        obj["type"], obj["body"] = rng.choice(_TYPES), _protocol_body(rng)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        key = rng.choice(_FIELDS)
        if op < 0.6:
            obj[key] = _value(rng)
        elif op < 0.8:
            obj.pop(key, None)
        else:
            obj[key] = rng.choice(_STRINGS)
    return obj


def _encode(rng: random.Random, obj: Any) -> bytes:
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    # A lone surrogate written raw is not UTF-8: those bytes must be refused too.
    return text.encode("utf-8", "surrogatepass")


def bodies(seed: int, n: int) -> Iterator[tuple[str, bytes]]:
    """(kind, body) pairs: kind "valid" (a send the policy admits), "queued" (admitted,
    flagged for approval) or "hostile" (anything else; it may still be admitted)."""
    rng = random.Random(seed)
    for serial in range(n):
        roll = rng.random()
        if roll < 0.01:
            yield "valid", _encode(rng, _base(rng, serial))
        elif roll < 0.03:
            yield "queued", _encode(rng, {**_base(rng, serial), "to": STRANGER})
        elif roll < 0.08:
            yield "hostile", bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        elif roll < 0.11:
            depth = rng.choice([33, 200, 5000])
            yield "hostile", b'{"to": ' + b"[" * depth + b"]" * depth + b"}"
        elif roll < 0.13:
            yield "hostile", b'{"to": "' + PEER.encode() + b'", "x": ' + b"9" * rng.choice([65, 5000]) + b"}"
        elif roll < 0.14:
            yield "hostile", b'{"to": 1, "to": 2}'
        elif roll < 0.15:
            yield "hostile", rng.choice([b"NaN", b"[1]", b'"s"', b"{", b"", b'{"to": Infinity}'])
        else:
            yield "hostile", _encode(rng, _mutated(rng, serial))
