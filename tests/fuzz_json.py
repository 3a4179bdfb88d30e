"""A seeded generator of hostile JSON texts for the fuzz runs of issue 29: mutations of a
good document (every field given every JSON type, lone surrogates escaped and raw, NUL,
control characters, long strings), nesting past the limit (to 200,000 deep), integers and
floats past the digit limit, NaN and Infinity, duplicate keys, invalid UTF-8 and raw
bytes, truncations. Pure; the same seed gives the same texts."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

STRINGS = [
    "", " ", "hello", "a\r\nBcc: victim@evil.test", "\x00", "\x7f", "\udcff", "\ud800x", "caf\u00e9",
    "=?utf-8?q?hi=0D=0A?=", "<x@agents.test>", "bob@partner.test", "x" * 901, "\u202e", "PAY", "{", "}",
    "\\", '"', "\t", "\n", "💸", "digest", "word_count", "message.received", "event",
]
KEYS = ["name", "text", "rail", "key", "type", "event_type", "event_id", "message", "inbox_id",
        "message_id", "thread_id", "labels", "v", "id", "amount", "exchange", "give", "want"]


def value(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if roll < 0.35:
        s = rng.choice(STRINGS)
        return s * rng.randint(1, 3) if rng.random() < 0.2 else s
    if roll < 0.45:
        return rng.choice([0, -1, 1, 2**63, 2**64, 10**30, 10**77, 1.5, -0.0, 1e308])
    if roll < 0.5:
        return rng.choice([None, True, False])
    if roll < 0.6:
        return "".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 12)))
    if roll < 0.8 and depth < 5:
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 5:
        return {rng.choice(KEYS): value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return "leaf"


def _mutate(rng: random.Random, good: str) -> Any:
    obj: Any = json.loads(good)  # a fresh copy to mutate
    for _ in range(rng.randint(1, 3)):
        target = obj
        while isinstance(target, dict) and target and rng.random() < 0.4:
            inner = target[rng.choice(list(target))]
            if not isinstance(inner, dict):
                break
            target = inner
        if not isinstance(target, dict):
            return value(rng)
        op, key = rng.random(), rng.choice(KEYS)
        if op < 0.6:
            target[key] = value(rng)
        elif op < 0.8:
            target.pop(key, None)
        else:
            target[key] = rng.choice(STRINGS)
    return obj


def texts(seed: int, n: int, good: dict[str, Any]) -> Iterator[str]:
    """`n` JSON-ish texts around `good` (str: raw lone surrogates are kept as they are,
    as argv bytes that are not UTF-8 arrive in Python)."""
    rng = random.Random(seed)
    good_text = json.dumps(good)
    for _ in range(n):
        roll = rng.random()
        if roll < 0.02:
            yield good_text
        elif roll < 0.06:
            raw = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
            yield raw.decode("utf-8", "surrogateescape")
        elif roll < 0.09:
            # 200,000 deep is 400 KB a text: one in a hundred of these is enough
            depth = 200_000 if rng.random() < 0.01 else rng.choice([31, 33, 200, 5_000])
            inner = "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth
            yield '{"name": "digest", "text": ' + inner + "}"
        elif roll < 0.11:
            digits = "9" * rng.choice([64, 65, 78, 4_300, 5_000])
            number = rng.choice([digits, "-" + digits, digits + ".5", "1e" + digits])
            yield '{"name": "digest", "n": ' + number + "}"
        elif roll < 0.12:
            yield rng.choice(['{"name": 1, "name": 2}', "NaN", '{"a": Infinity}', "[1]", '"s"', "{", "",
                              "null"])
        elif roll < 0.15:
            text = json.dumps(_mutate(rng, good_text))
            yield text[: rng.randint(0, len(text))]
        else:
            yield json.dumps(_mutate(rng, good_text), ensure_ascii=rng.random() < 0.5)
