"""Benchmark: envelopay.protocol.parse() against two stdlib floors, measured in the same run.

    .venv/bin/python bench/parse.py [--seconds S] [--strict]

Workloads: a ~1 KB PAY message as compose() writes it, and the whole conformance corpus.
Floors: `email.message_from_bytes(policy=policy.default)` + `json.loads` of the JSON
payload, and the same with `policy.compat32`. Each figure is the best of several timed
rounds (robust on a shared machine), all on one core in one process.
Targets (issue 2): >= 5,000 PAY parses/s and >= 5x the policy.default floor.
"""

from __future__ import annotations

import argparse
import email
import json
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email import policy
from email.message import Message
from pathlib import Path

from _pay import pay_message

import envelopay.protocol
from envelopay.protocol import parse

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fixtures" / "conformance"


def _json_from(msg: Message, decode: Callable[[Message], str]) -> object:
    # The floor's payload rule: the first application/json part, else the first text
    # part, through json.loads (corpus messages that are not JSON count as parsed).
    parts = [p for p in msg.walk() if not p.is_multipart()]
    first = parts[0] if parts else None
    chosen = next((p for p in parts if p.get_content_type() == "application/json"), first)
    if chosen is None:
        return None
    try:
        return json.loads(decode(chosen))
    except (ValueError, LookupError):
        return None


def floor_default(raw: bytes) -> object:
    msg = email.message_from_bytes(raw, policy=policy.default)
    return _json_from(msg, lambda p: str(p.get_content()))  # type: ignore[attr-defined]


def floor_compat32(raw: bytes) -> object:
    msg = email.message_from_bytes(raw, policy=policy.compat32)

    def decode(part: Message) -> str:
        payload = part.get_payload(decode=True)
        return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""

    return _json_from(msg, decode)


def _one_round(fn: Callable[[bytes], object], msgs: list[bytes], seconds: float) -> float:
    n = 0
    start = time.perf_counter()
    while True:
        for raw in msgs:
            fn(raw)
        n += len(msgs)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def rates(
    fns: list[Callable[[bytes], object]], msgs: list[bytes], seconds: float, rounds: int = 5
) -> list[float]:
    """Messages per second for each function: the best of `rounds` rounds. Rounds of the
    functions are interleaved so that they all see the same background load."""
    best = [0.0] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = max(best[i], _one_round(fn, msgs, seconds / rounds))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0, help="time budget per figure (default 4)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args()

    pay = pay_message(envelopay.protocol)
    assert parse(pay).valid
    manifest = json.loads((CORPUS / "manifest.json").read_text(encoding="utf-8"))
    corpus = [(CORPUS / v["file"]).read_bytes() for v in manifest["vectors"]]
    corpus_kb = sum(map(len, corpus)) / len(corpus) / 1024

    print(f"envelopay parse benchmark — {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}")
    print(f"PAY message: {len(pay)} bytes; corpus: {len(corpus)} messages, mean {corpus_kb:.2f} KB\n")
    ok = True
    pay_label = f"PAY ({len(pay) / 1024:.1f} KB, as compose() writes it)"
    for label, msgs in ((pay_label, [pay]), ("corpus", corpus)):
        ours, default, compat = rates([parse, floor_default, floor_compat32], msgs, args.seconds)
        print(f"{label}:")
        print(f"  parse()                         {ours:>9,.0f} msg/s")
        print(f"  floor policy.default + json     {default:>9,.0f} msg/s   ratio {ours / default:5.1f}x")
        print(f"  floor policy.compat32 + json    {compat:>9,.0f} msg/s   ratio {ours / compat:5.1f}x")
        if label.startswith("PAY"):
            hit = ours >= 5000 and ours / default >= 5
            ok = ok and hit
            print(f"  target >= 5,000 msg/s and >= 5x policy.default: {'met' if hit else 'MISSED'}")
        print()
    return 0 if ok or not args.strict else 1


if __name__ == "__main__":
    sys.exit(main())
