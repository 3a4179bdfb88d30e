"""A 100,000-message fuzz run: mutated corpus vectors and generated messages.

Every message must give a Parsed value that satisfies the invariants, with no parser
error; generated messages whose payload is known must parse back to it."""

from __future__ import annotations

import base64
import binascii
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from envelopay.protocol import MessageType, OopsCode, parse

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"
TOTAL = 100_000
TOKENS = [
    b"{",
    b"}",
    b"\r\n",
    b"\n",
    b"\r\n\r\n",
    b"--",
    b"--b0undary\r\n",
    b"=?utf-8?q?",
    b"?=",
    b"> ",
    b"-- \r\n",
    b"Subject: PAY\r\n",
    b"From: x@y.test\r\n",
    b"Content-Type: multipart/mixed; boundary=b0undary\r\n",
    b"Content-Type: application/json\r\n",
    b"Content-Transfer-Encoding: base64\r\n",
    b'"amount":',
    b'"v":"0.1.0"',
    b'"type":"pay"',
    b"\x00",
    b"\xff\xfe",
    b"=\r\n",
    b"=C3=A9",
    b"<p>",
    b"</pre>",
    b"\t",
    b" ",
    b"[",
    b"]",
    b'"',
    b"message/rfc822",
    b"Re: ",
    b"OOPS",
    b"\\u0000",
]
SUBJECTS = [
    "PAY",
    "PAY | x",
    "WHICH",
    "ORDER | y",
    "OOPS | z",
    "INVOICE",
    "FOO",
    "Re: PAY",
    "pay",
    "",
    "=?utf-8?b?UEFZIHwgw6k=?=",
    "ACCEPT|",
    "METHODS | q",
    "OFFER",
    "FULFILL | done",
]


def _corpus() -> tuple[list[bytes], list[dict[str, Any]]]:
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
    raws = [(CORPUS / v["file"]).read_bytes() for v in manifest["vectors"]]
    valid = [
        v
        for v in manifest["vectors"]
        if v["expect"]["valid"]
        and v["expect"]["body"]
        and v["expect"]["body"].get("type") == v["expect"]["type"]
        and not v["options"].get("extensions")  # WAIT, WHATSUP: tests/protocol/test_status.py
    ]
    return raws, [v["expect"]["body"] for v in valid]


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(data))
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            del data[pos : pos + rng.randint(1, 64)]
        elif op == 2:
            data[pos:pos] = rng.choice(TOKENS)
        elif op == 3:
            end = min(len(data), pos + rng.randint(1, 200))
            data[pos:pos] = data[pos:end]
        elif op == 4:
            del data[pos:]
        else:
            start = rng.randint(0, len(data))
            data[pos:pos] = data[start : start + rng.randint(1, 80)]
    return bytes(data)


def _wrap(rng: random.Random, body: dict[str, Any]) -> bytes:
    """A known-good message with `body` in a random placement and encoding."""
    kind = MessageType(body["type"])
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1, 2]))
    ctype, cte = rng.choice(
        [
            ("text/plain", "7bit"),
            ("text/plain", "base64"),
            ("text/plain", "qp"),
            ("text/html", "7bit"),
            ("application/json", "base64"),
        ]
    )
    if ctype != "application/json" and rng.random() < 0.5:
        text = rng.choice(["Hi {there},\n", '> quoted {"v":1}\n', ""]) + text
    if ctype != "application/json" and rng.random() < 0.5:
        text += rng.choice(['\n-- \nsig {"v":"x","type":"y"}', '\n> old\n> {"type":"pay"}', "\nbye"])
    if ctype == "text/html":
        # As a client writes HTML: a line break is <br> (a source line break alone is a
        # space on the page, SPEC.md "Payload placement" 3).
        escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        text = "<div>" + escaped.replace("\n", "<br>\n") + "</div>"
    data = text.encode("utf-8")
    if cte == "base64":
        data = base64.encodebytes(data)
    elif cte == "qp":
        data, cte = binascii.b2a_qp(data), "quoted-printable"
    subject = kind.keyword + rng.choice(["", " | note", "|x", " | ünï"])
    head = (
        f"From: a@x.test\r\nTo: b@y.test\r\nSubject: {subject}\r\nMessage-ID: <f@x.test>\r\n"
        f"Content-Type: {ctype}; charset=utf-8\r\nContent-Transfer-Encoding: {cte}\r\n\r\n"
    )
    return head.encode("utf-8") + data


def test_fuzz_100k_messages() -> None:
    rng = random.Random(20261130)
    raws, bodies = _corpus()
    seen: Counter[str] = Counter()
    known = 0
    for i in range(TOTAL):
        roll = rng.random()
        expected: dict[str, Any] | None = None
        if roll < 0.70:
            raw = _mutate(rng, rng.choice(raws))
        elif roll < 0.85:
            expected = rng.choice(bodies)
            raw = _wrap(rng, expected)
        else:
            subject = rng.choice(SUBJECTS)
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
            raw = f"Subject: {subject}\r\nFrom: a@x.test\r\n\r\n".encode() + _mutate(rng, body + b"{}")
        p = parse(raw)
        assert "parser_error" not in p.warnings, (i, raw[:300])
        if p.valid:
            assert p.protocol and p.oops is None and not p.problems and p.message is not None
        if p.oops is not None:
            assert p.protocol and not p.valid and p.type is not MessageType.OOPS
            assert p.problems[0].code is p.oops
        if not p.protocol:
            assert p.oops is None and p.type is None
        if expected is not None:
            known += 1
            assert p.valid and p.body == expected, (i, raw[:400], p.problems)
        seen[p.oops.value if p.oops else ("valid" if p.valid else "none")] += 1
    assert known > 10_000
    # The generator reaches every outcome parse() can produce.
    parse_codes = {
        OopsCode.UNKNOWN_TYPE,
        OopsCode.INVALID_JSON,
        OopsCode.MISSING_FIELD,
        OopsCode.INVALID_FIELD,
        OopsCode.TYPE_MISMATCH,
        OopsCode.UNSUPPORTED_VERSION,
        OopsCode.MISSING_WALLET,
    }
    assert {c.value for c in parse_codes} | {"valid", "none"} <= set(seen), seen
