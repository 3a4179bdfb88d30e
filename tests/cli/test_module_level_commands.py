"""The CLI's commands live at module level (issue 28: `register()` closures ran to 216
lines): a command module defines its commands as functions of the module and its
`register(app)` only mounts them; no function in cli/ nests one over 60 lines; and
cli/app.py mounts every `*_cmds` module, so a new one cannot be left out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envelopay.cli import app as app_module

CLI = Path(__file__).resolve().parents[2] / "src" / "envelopay" / "cli"
MODULES = sorted(CLI.glob("*.py"))


def _commands_inside_functions(tree: ast.Module) -> list[str]:
    """Functions decorated `@<something>.command(...)` that are not at module level."""
    found = []
    for outer in ast.walk(tree):
        if not isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(outer):
            if inner is outer or not isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for d in inner.decorator_list:
                call = d.func if isinstance(d, ast.Call) else d
                if isinstance(call, ast.Attribute) and call.attr == "command":
                    found.append(f"{outer.name}.{inner.name}")
    return found


def _long_closures(tree: ast.Module, limit: int = 60) -> list[str]:
    found = []
    for outer in ast.walk(tree):
        if not isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(outer):
            if inner is not outer and isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                size = (inner.end_lineno or inner.lineno) - inner.lineno + 1
                if size > limit:
                    found.append(f"{outer.name}.{inner.name}: {size} lines")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_commands_are_module_level_and_no_closure_is_long(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert _commands_inside_functions(tree) == [], f"{path.name}: define these commands at module level"
    assert _long_closures(tree) == [], f"{path.name}: a nested function over 60 lines"


def test_the_checks_see_a_closure(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    tree = ast.parse(
        "def register(app):\n    @app.command('x')\n    def x():\n" + body + "\n"
    )
    assert _commands_inside_functions(tree) == ["register.x"]
    assert _long_closures(tree) == ["register.x: 61 lines"]


def test_app_mounts_every_command_module() -> None:
    source = (CLI / "app.py").read_text()
    tree = ast.parse(source)
    mounted = {
        elt.id
        for node in ast.walk(tree)
        if isinstance(node, ast.For) and isinstance(node.iter, ast.Tuple)
        for elt in node.iter.elts
        if isinstance(elt, ast.Name)
    }
    on_disk = {p.stem for p in MODULES if p.stem.endswith("_cmds")}
    assert on_disk - mounted == set(), "add these to cli/app.py's tuple (help lists them in its order)"
    assert mounted <= on_disk
    for name in mounted:  # each is imported and registers
        assert callable(getattr(getattr(app_module, name), "register", None)), name
