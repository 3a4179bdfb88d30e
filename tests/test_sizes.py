"""Small modules and short functions (issue 28, "Done when"): no module of src/envelopay
or of the rail distributions (rails/*/src) over 500 lines and no function over 80, tables
excepted (a table is data, read as one).

A module or function that outgrows its bound is split by role, into parts whose names say
what they do; a table that must stay whole is named in TABLES with why."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "src" / "envelopay", ROOT / "rails" / "solana" / "src", ROOT / "rails" / "base" / "src"]
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# module path (under its source root) -> why it may be longer: a table, read as one
TABLES: dict[str, str] = {}


def oversized(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel in TABLES:
            continue
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{rel}: {lines} lines (at most {MAX_MODULE_LINES}): split it by role")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES:
                    found.append(f"{rel}:{node.lineno} {node.name}: {size} lines (at most "
                                 f"{MAX_FUNCTION_LINES}): split it into named steps")
    return found


def test_no_module_or_function_outgrows_its_bound() -> None:
    found = [f"{src.relative_to(ROOT)}/{line}" for src in SOURCES for line in oversized(src)]
    assert found == [], "\n" + "\n".join(found)


def test_the_check_sees_both(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "big.py").write_text("def f():\n" + body + "\n" + "y = 0\n" * MAX_MODULE_LINES)
    (tmp_path / "small.py").write_text("def g():\n    return 1\n")
    assert oversized(tmp_path) == [
        f"big.py: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines (at most {MAX_MODULE_LINES}): "
        "split it by role",
        f"big.py:1 f: {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES}): split it into "
        "named steps",
    ]
