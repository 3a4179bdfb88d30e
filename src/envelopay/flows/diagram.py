"""Render the flow tables as Mermaid state diagrams and Markdown tables for SPEC.md.

Pure string functions; scripts/flow_diagrams.py does the file handling:

    python scripts/flow_diagrams.py           # rewrite SPEC.md's generated block
    python scripts/flow_diagrams.py --check   # exit 1 if it is out of date

Only the text between `<!-- generated:flows -->` and `<!-- /generated:flows -->`
is replaced. `mermaid` and `replace_block` draw any state table the same way (the
enforcer's send and intent tables: enforcer/common/state_table.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from envelopay.flows import TABLES, first_contact
from envelopay.flows.core import Event, FlowKind, Row, Table

__all__ = ["BEGIN", "END", "markers", "mermaid", "render", "render_flow", "replace_block"]



def markers(name: str) -> tuple[str, str]:
    """The comments around a generated block in SPEC.md."""
    return f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"


BEGIN, END = markers("flows")


def mermaid(edges: Iterable[tuple[str, str, str]]) -> list[str]:
    """A Mermaid state diagram of (from, to, label) edges; "start" is the initial state."""
    lines = ["```mermaid", "stateDiagram-v2"]
    lines += [f"    {_node(src)} --> {dst}: {label}" for src, dst, label in edges]
    return [*lines, "```"]

_TITLES = {
    FlowKind.PAY: "Pay — PAY",
    FlowKind.ORDER: "Order work — ORDER → INVOICE → PAY → FULFILL; free work ORDER → FULFILL",
    FlowKind.INVOICE: "Invoice — INVOICE → PAY",
    FlowKind.FIRST_CONTACT: "First contact — WHICH → METHODS → ORDER → …",
    FlowKind.EXCHANGE: "Exchange — OFFER → ACCEPT",
    FlowKind.PREPAID: "Prepaid order (v0.2.0) — ORDER with proof → FULFILL",
}


def _event(e: Event) -> str:
    return "ORDER+proof" if e is Event.ORDER_PREPAID else e.value.upper()


def _node(state: str) -> str:
    return "[*]" if state == "start" else state


def _quiet(r: Row) -> bool:
    return r.event is Event.OOPS and r.new_state == r.state


def render_flow(kind: FlowKind, table: Table) -> str:
    """One flow: a Mermaid diagram and its table, OOPS rows that change nothing left out
    (they are summed up in one sentence); an OOPS that returns the flow is shown."""
    edges: dict[tuple[str, str, Event], list[str]] = defaultdict(list)
    for r in table:
        if _quiet(r):
            continue
        edges[(r.state, r.new_state, r.event)].append(f"{r.side.value} {r.direction.value}")
    lines = [f"### {_TITLES[kind]}", ""]
    labelled = ((src, dst, f"{_event(event)} ({', '.join(how)})") for (src, dst, event), how in edges.items())
    lines += mermaid(labelled)
    lines += [
        "",
        "| state | message | dir | side | → state | checks and actions |",
        "|---|---|---|---|---|---|",
    ]
    for r in table:
        if _quiet(r):
            continue
        acts = ", ".join(a.value for a in r.actions) or "—"
        cells = (r.state, _event(r.event), r.direction.value, r.side.value, r.new_state, acts)
        lines.append("| " + " | ".join(cells) + " |")
    oops_states = sorted({r.state for r in table if r.event is Event.OOPS})
    rest = " otherwise" if any(r.event is Event.OOPS and not _quiet(r) for r in table) else ""
    lines += ["", f"OOPS in or out is recorded in states {', '.join(oops_states)} and{rest} changes nothing.",
              ""]
    return "\n".join(lines)


def render() -> str:
    parts = [
        BEGIN,
        "",
        "_Generated from the tables in src/envelopay/flows/ by `python "
        "scripts/flow_diagrams.py`; a test fails when this block is stale._",
        "",
    ]
    for kind, table in TABLES.items():
        if kind is FlowKind.FIRST_CONTACT:
            # Only its own rows; after "quoted" it is the order / prepaid table.
            own: tuple[Row, ...] = tuple(
                r for r in first_contact.TRANSITIONS if r.state in ("start", "asked")
            )
            parts.append(render_flow(kind, own))
            parts.append(
                "After `quoted` the flow continues with the order and prepaid rows, their `start` "
                "renamed `quoted`.\n"
            )
        else:
            parts.append(render_flow(kind, table))
    parts.append(END)
    return "\n".join(parts)


def replace_block(text: str, block: str, name: str = "flows") -> str:
    """`text` with its generated block `name` replaced by `block` (ValueError if it has none)."""
    begin, end_mark = markers(name)
    start, end = text.find(begin), text.find(end_mark)
    if start < 0 or end < start:
        raise ValueError(f"no {begin} ... {end_mark} block")
    return text[:start] + block + text[end + len(end_mark) :]
