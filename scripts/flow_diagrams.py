"""Rewrite (or --check) the generated diagrams in SPEC.md: the flow tables', and the
enforcer's send and payment intent tables'."""

from __future__ import annotations

import sys
from pathlib import Path

from envelopay.enforcer.send.states import SENDS
from envelopay.enforcer.spend.states import INTENTS
from envelopay.flows.diagram import render, replace_block

SPEC = Path(__file__).resolve().parents[1] / "SPEC.md"


def main(argv: list[str]) -> int:
    text = SPEC.read_text(encoding="utf-8")
    new = replace_block(text, render())
    for table in (SENDS, INTENTS):
        new = replace_block(new, table.render_mermaid(), table.name)
    if new == text:
        return 0
    if "--check" in argv:
        print("SPEC.md diagrams are out of date: run python scripts/flow_diagrams.py")
        return 1
    SPEC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
