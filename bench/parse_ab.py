"""Benchmark: this tree's parse() against another tree's, in one process, interleaved.

    git archive <commit> src | tar -x -C /tmp/base
    .venv/bin/python bench/parse_ab.py /tmp/base/src [--rounds N]

Both parsers are loaded side by side (the other tree's modules first, then this one's)
and timed in alternating rounds on the same bytes, by CPU time of this process, best
round kept: on a loaded shared machine that is far steadier than separate runs by
wall time. Messages: the PAY each tree's compose() writes. Figures: parse() of the
same bytes (the cost of the parsing rules alone), and of each tree's own PAY (the
cost a receiver of our mail sees). Target (issue 12): >= 0.90 for both.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _pay import pay_message

HERE = Path(__file__).resolve().parents[1] / "src"


def _load(src: Path) -> tuple[Callable[[bytes], Any], bytes]:
    for name in [m for m in sys.modules if m == "envelopay" or m.startswith("envelopay.")]:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        import envelopay.protocol as protocol
    finally:
        sys.path.remove(str(src))
    return protocol.parse, pay_message(protocol)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("other", type=Path, help="the other tree's src/ directory")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--batch", type=int, default=400)
    args = ap.parse_args()
    other_parse, other_pay = _load(args.other)
    our_parse, our_pay = _load(HERE)
    cases = {
        "other tree, its PAY": (other_parse, other_pay),
        "this tree, other PAY": (our_parse, other_pay),
        "this tree, its PAY": (our_parse, our_pay),
    }
    best = dict.fromkeys(cases, 0.0)
    for _ in range(args.rounds):
        for name, (fn, raw) in cases.items():
            start = time.process_time()
            for _ in range(args.batch):
                fn(raw)
            spent = time.process_time() - start
            if spent > 0:
                best[name] = max(best[name], args.batch / spent)
    stamp = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    print(f"envelopay parse A/B — {stamp}, {args.rounds} rounds of {args.batch}")
    print(f"PAY bytes: other tree {len(other_pay)}, this tree {len(our_pay)}")
    for name, rate in best.items():
        print(f"  {name:<22} {rate:>9,.0f} msg/s (CPU time)")
    floor = best["other tree, its PAY"]
    rules = best["this tree, other PAY"] / floor
    layout = best["this tree, its PAY"] / floor
    print(f"  parsing rules, same bytes:        ratio {rules:.3f}")
    print(f"  PAY as each tree composes it:     ratio {layout:.3f}")
    ok = rules >= 0.90 and layout >= 0.90
    print(f"  target >= 0.90 for both: {'met' if ok else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
