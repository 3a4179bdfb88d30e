"""No room reaches into another room's private names (issue 11: engine/poison.py took
compose's `_ADDRESS`); what a room needs from another is public there. Within a room a
module may share its siblings' private helpers."""

from __future__ import annotations

import ast
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay.protocol.compose import HeaderValueError, compose, is_bare_address
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound

SRC = Path(__file__).resolve().parents[1] / "src" / "envelopay"


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_module_imports_a_private_name_of_another_room() -> None:
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        own = _room("envelopay." + ".".join(path.relative_to(SRC).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.startswith("envelopay.") and _room(node.module) != own:
                bad += [f"{path.relative_to(SRC)}: {node.module}.{a.name}"
                        for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert bad == []


@pytest.mark.parametrize("address", [
    "agent@garden.local", "a.b+c@x.example", "no-at-sign", "two@@x", "a b@x.example",
    "<a@x.example>", "a@x.example\r\nBcc: v@x", "é@x.example", "a@" + "x" * 254,
])
def test_is_bare_address_is_exactly_what_compose_accepts(address: str) -> None:
    try:
        out = Outbound("me@garden.local", address, Which(id="wch_1"), "<m@garden.local>", datetime.now(UTC))
        compose(out)
        accepted = True
    except HeaderValueError:
        accepted = False
    assert is_bare_address(address) is accepted
