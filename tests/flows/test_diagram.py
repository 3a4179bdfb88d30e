"""SPEC.md's flow diagrams are generated from the tables and kept up to date."""

from __future__ import annotations

from pathlib import Path

import pytest

from envelopay.flows import TABLES, FlowKind
from envelopay.flows.core import Event
from envelopay.flows.diagram import BEGIN, END, render, replace_block

SPEC = Path(__file__).resolve().parents[2] / "SPEC.md"


def test_spec_md_diagrams_match_the_tables() -> None:
    text = SPEC.read_text(encoding="utf-8")
    assert replace_block(text, render()) == text, "run: python scripts/flow_diagrams.py"


def test_every_row_is_drawn() -> None:
    out = render()
    for kind, table in TABLES.items():
        for r in table:
            if r.event is Event.OOPS or (
                kind is FlowKind.FIRST_CONTACT and r.state not in ("start", "asked")
            ):
                continue
            cells = f"| {r.state} | " if r.state != "start" else "| start | "
            assert cells in out
            assert f"{r.side.value} {r.direction.value}" in out


def test_changing_a_table_changes_the_output() -> None:
    before = render()
    table = TABLES[FlowKind.PAY]
    TABLES[FlowKind.PAY] = table[:1]
    try:
        assert render() != before
    finally:
        TABLES[FlowKind.PAY] = table


def test_replace_block_needs_markers() -> None:
    with pytest.raises(ValueError):
        replace_block("no markers here", render())
    assert replace_block(f"a{BEGIN}old{END}b", "NEW") == "aNEWb"
