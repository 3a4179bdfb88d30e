"""The layering of docs/DESIGN.md: protocol and flows are sans-IO."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "envelopay"

FORBIDDEN_FOR_PURE = {
    "envelopay.mail",
    "envelopay.ledger",
    "envelopay.agent",
    "envelopay.enforcer",
    "envelopay.cli",
    "envelopay.dkim",
    "solana",
    "solders",
    "web3",
    "eth_tester",
    "socket",
    "sqlite3",
    "psycopg",
    "asyncio",
    "aiosmtplib",
    "aiosmtpd",
    "aioimaplib",
    "dkim",
    "httpx",
    "subprocess",
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _violations(package: str, forbidden: set[str]) -> list[str]:
    bad = []
    for path in sorted((SRC / package).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                bad.append(f"{path.relative_to(SRC)} imports {name}")
    return bad


def test_protocol_is_sans_io() -> None:
    assert _violations("protocol", FORBIDDEN_FOR_PURE | {"envelopay.flows", "envelopay.rails"}) == []


def test_flows_are_sans_io() -> None:
    assert _violations("flows", FORBIDDEN_FOR_PURE) == []


def test_rails_interface_imports_no_chain_library() -> None:
    assert _violations("rails", FORBIDDEN_FOR_PURE - {"asyncio"}) == []


def test_checker_sees_a_violation(tmp_path: Path) -> None:
    # The checker itself must be able to fail.
    sample = tmp_path / "x.py"
    sample.write_text("import socket\nfrom envelopay.mail import smtp\n")
    assert _imports(sample) == {"socket", "envelopay.mail"}
