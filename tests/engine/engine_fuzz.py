"""Seeded hostile mail for the engine fuzz (tests/engine/test_engine_fuzz.py).

Inputs come from the conformance corpus (fixtures/conformance) in three ways: byte
mutations of a vector, structure mutations of a valid vector's JSON body (values
swapped for poison: lone surrogates, NUL, deep nesting, 5,000-digit numbers, wrong
types, huge strings; fields dropped or duplicated; refs to nothing), and header
mutations (Message-ID, From, In-Reply-To, Subject made hostile). Pure and seeded: the
same seed gives the same inputs in every process.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"
TOKENS = [
    b"{",
    b"}",
    b"\r\n",
    b"\n",
    b"\r",
    b"\r\n\r\n",
    b"\x00",
    b"\xff\xfe",
    b"\xed\xb3\xbf",
    b"=?utf-8?q?",
    b"?=",
    b'"',
    b"[",
    b"]",
    b"From ",
    b"From : x@evil.test\r\n",
    b"\t",
    b"\\udcff",
    b"\\u0000",
]
POISON: list[Any] = [
    "\udcff",
    "\ud800x",
    "a\x00b",
    "",
    "x" * 20_000,
    "__BIGNUM__",
    -1,
    1.5,
    True,
    None,
    [],
    {},
    "0" * 80,
    {"op": "echo"},
    {"op": "free"},
    ["\udcff"],
    "<nobody@nowhere>",
    "ünï",
    "0x" + "f" * 64,
]
SUBJECTS = [
    "PAY",
    "ORDER",
    "WHICH",
    "OFFER",
    "ACCEPT",
    "INVOICE",
    "METHODS",
    "FULFILL",
    "OOPS",
    "Re: PAY",
    "PAY | \udcff",
    "NOPE",
    "",
]


def corpus() -> tuple[list[bytes], list[dict[str, Any]]]:
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
    raws = [(CORPUS / v["file"]).read_bytes() for v in manifest["vectors"]]
    bodies = [
        v["expect"]["body"]
        for v in manifest["vectors"]
        if v["expect"]["valid"] and isinstance(v["expect"].get("body"), dict)
    ]
    return raws, bodies


def nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def poison(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.15:
        return nested(rng.choice([50, 200, 300, 1000]))
    return rng.choice(POISON)


def mutate_bytes(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        op, pos = rng.randrange(5), rng.randint(0, len(data))
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            del data[pos : pos + rng.randint(1, 64)]
        elif op == 2:
            data[pos:pos] = rng.choice(TOKENS)
        elif op == 3:
            data[pos:pos] = data[pos : pos + rng.randint(1, 200)]
        else:
            del data[pos:]
    return bytes(data)


def mutate_body(rng: random.Random, body: dict[str, Any]) -> dict[str, Any]:
    out = dict(body)
    if rng.random() < 0.3:  # on the fuzz engine's own rail, so proofs reach verification
        out.update(
            chain="testchain",
            token="TOK",
            amount=rng.choice(["100", "1", "7"]),
            proof={"tx": rng.choice(["tx0", "tx1", "tx2", "tx3", "nope"])},
        )
    keys = [*out.keys(), "id", "task", "proof", "invoice_ref", "order_ref", "amount", "note", "v", "type"]
    for _ in range(rng.randint(1, 3)):
        key, roll = rng.choice(keys), rng.random()
        if roll < 0.6:
            out[key] = poison(rng)
        elif roll < 0.8:
            out.pop(key, None)
        else:
            out[key] = {"tx": poison(rng)} if key == "proof" else f"{key}_{rng.randrange(10**6)}"
    return out


def _json(value: Any, rng: random.Random) -> str:
    # ensure_ascii spells lone surrogates as \\udcff escapes, which is how they arrive.
    try:
        # A 5,000-digit number goes in as text (Python will not print one).
        return json.dumps(value, ensure_ascii=True).replace('"__BIGNUM__"', "9" * 5000)
    except (ValueError, RecursionError):
        return '{"v":"0.1.0","type":"pay"' + "[" * rng.randint(1, 50)


def envelope(rng: random.Random, body: str, *, subject: str, n: int) -> bytes:
    mid = rng.choice(
        [f"<f{n}@client.test>"] * 6 + ["", "<\udcff@x>", "no-brackets", f"<f{n % 50}@client.test>"]
    )
    sender = rng.choice(["buyer@client.test"] * 6 + ["b\udcff@x.test", "", "a@b@c", "Mallory <m@evil.test>"])
    irt = rng.choice([None] * 5 + ["<nothing@here>", "<\udcff@x>", "<inv@garden.test>"])
    head = f"From: {sender}\r\nTo: worker@garden.test\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n"
    if irt:
        head += f"In-Reply-To: {irt}\r\n"
    head += "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    try:  # a lone \udcXX becomes the raw byte XX (what undecodable header bytes read back as)
        raw_head = head.encode("utf-8", "surrogateescape" if rng.random() < 0.5 else "surrogatepass")
    except UnicodeEncodeError:
        raw_head = head.encode("utf-8", "surrogatepass")
    return raw_head + body.encode("utf-8", "surrogatepass") + b"\r\n"


def inputs(seed: int, count: int, raws: list[bytes], bodies: list[dict[str, Any]]) -> list[bytes]:
    rng = random.Random(seed)
    out: list[bytes] = []
    for n in range(count):
        roll = rng.random()
        if roll < 0.35:
            out.append(mutate_bytes(rng, rng.choice(raws)))
        elif roll < 0.9:
            body = mutate_body(rng, rng.choice(bodies))
            kind = body.get("type")
            subject = kind.upper() if isinstance(kind, str) and rng.random() < 0.8 else rng.choice(SUBJECTS)
            out.append(envelope(rng, _json(body, rng), subject=subject, n=n))
        else:
            text = _json(poison(rng), rng)
            out.append(envelope(rng, text, subject=rng.choice(SUBJECTS), n=n))
    return out
