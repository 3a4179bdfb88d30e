"""The layering of docs/DESIGN.md: rooms import only rooms below them, protocol and flows
are sans-IO, no module of src/envelopay takes part in an import cycle (imports inside
functions included), a function-level import says why it is there, and no plugin
distribution is imported by name."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "envelopay"

FORBIDDEN_FOR_PURE = {
    "envelopay.mail",
    "envelopay.ledger",
    "envelopay.agent",
    "envelopay.engine",
    "envelopay.worker",
    "envelopay.endpoints",
    "envelopay.node",
    "envelopay.client",
    "envelopay.config",
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
            if node.module == "envelopay":  # `from envelopay import dkim` imports envelopay.dkim
                names.update(f"envelopay.{a.name}" for a in node.names)
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
    sample.write_text("import socket\nfrom envelopay.mail import smtp\nfrom envelopay import dkim\n")
    assert _imports(sample) == {"socket", "envelopay.mail", "envelopay", "envelopay.dkim"}


# ------------------------------------------------------------------ rooms
# The rooms of src/envelopay from the top of docs/DESIGN.md's layer diagram down. A
# room imports only rooms of a lower rank (lazy imports inside functions included);
# rooms of the same rank (worker, endpoints, testing; enforcer, devnet; mail, ledger, config) do
# not import each other. testing sits above the engine: its kits and mocks (the rails mock
# kit's WorkerApp is an engine Application) stand on the rooms they check. (`agent`, the
# deprecated shims, is gone: test_rooms checks it.)
RANKS = {
    "cli": 9,
    "client": 8,
    "node": 7,
    "worker": 6,
    "endpoints": 6,
    "engine": 5,
    "enforcer": 4,
    "devnet": 4,
    "dkim": 3,
    "testing": 6,
    "mail": 2,
    "ledger": 2,
    "config": 2,
    "rails": 1,
    "flows": 1,
    "persist": 1,
    "protocol": 0,
    "errors": -1,
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "envelopay" or len(parts) < 2:
        return None
    return parts[1]


def _rank_violations(src: Path) -> list[str]:
    bad = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if rel.parts == ("__init__.py",):
            continue  # the package facade: re-exports of the pure layers, pinned by test_api
        room = rel.parts[0].removesuffix(".py")
        if room not in RANKS:
            bad.append(f"{rel}: room {room!r} has no rank (add it here and to docs/DESIGN.md)")
            continue
        for name in sorted(_imports(path)):
            other = _room(name)
            if other is None or other == room or other.startswith("_"):
                continue
            if other not in RANKS:
                bad.append(f"{rel} imports {name}: room {other!r} has no rank")
            elif RANKS[other] >= RANKS[room]:
                bad.append(f"{rel} ({room}) imports {name} ({other})")
    return bad


def test_rooms_import_only_rooms_below() -> None:
    assert _rank_violations(SRC) == []


def test_every_room_in_src_has_a_rank() -> None:
    rooms = {
        p.name.removesuffix(".py") for p in SRC.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()
    }
    assert rooms - {"__init__"} == set(RANKS)


def test_rank_checker_sees_an_upward_import(tmp_path: Path) -> None:
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "x.py").write_text("def f():\n    from envelopay.worker.app import WorkerApp\n")
    (tmp_path / "worker").mkdir()
    (tmp_path / "worker" / "y.py").write_text("from envelopay.endpoints import calls\n")
    assert _rank_violations(tmp_path) == [
        "engine/x.py (engine) imports envelopay.worker.app (worker)",
        "worker/y.py (worker) imports envelopay.endpoints (endpoints)",
    ]


# ---------------------------------------------------------------- import cycles


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_time_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run when a module is imported: its body and top-level if/try
    blocks, but not `if TYPE_CHECKING:` blocks and not function bodies."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        stmt = pending.pop()
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.append(stmt)
        elif isinstance(stmt, ast.If):
            test = stmt.test
            guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
            )
            if not guarded:
                pending += stmt.body
            pending += stmt.orelse
        elif isinstance(stmt, ast.Try):
            pending += stmt.body + stmt.orelse + stmt.finalbody
            for handler in stmt.handlers:
                pending += handler.body
    return found


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports inside function bodies (not under `if TYPE_CHECKING:`): they run when
    the function is first called, so they close import cycles as surely as the others."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for stmt in child.orelse:
                    visit_one(stmt, in_function)
                continue
            visit_one(child, in_function)

    def visit_one(child: ast.AST, in_function: bool) -> None:
        if isinstance(child, ast.Import | ast.ImportFrom) and in_function:
            found.append(child)
        visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return sorted(found, key=lambda n: n.lineno)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(root: Path) -> dict[str, set[str]]:
    """module → the modules under `root` that importing it, or calling its functions,
    imports (parents' __init__ files, which Python runs implicitly, are not edges;
    `if TYPE_CHECKING:` imports, which never run, are not either)."""
    paths = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str] = set()
        tree = ast.parse(path.read_text())
        for node in _import_time_imports(tree) + _function_imports(tree):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            else:
                module = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    package = package[: len(package) - (node.level - 1)]
                    module = ".".join([*package, *([module] if module else [])])
                # `from pkg import sub` imports the submodule when there is one.
                wanted = [
                    f"{module}.{a.name}" if f"{module}.{a.name}" in paths else module for a in node.names
                ]
            for want in wanted:
                while want and want not in paths:
                    want = want.rpartition(".")[0]
                if want and want != name:
                    targets.add(want)
        graph[name] = targets
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(groups)


def test_no_import_cycles_in_src() -> None:
    graph = import_graph(SRC.parent)
    assert "envelopay.engine.inbound" in graph["envelopay.engine"]  # the graph sees the code
    assert find_cycles(graph) == []


def test_cycle_finder_sees_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("from pkg import c\nx = 1\n")
    (pkg / "c.py").write_text("try:\n    import pkg.a\nexcept ImportError:\n    pass\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\n")
    (pkg / "e.py").write_text("def f() -> None:\n    from . import a\n")
    (pkg / "f.py").write_text("from . import a\n")
    # A cycle closed only by an import inside a function is a cycle all the same.
    (pkg / "g.py").write_text("from pkg import h\n")
    (pkg / "h.py").write_text("def f() -> None:\n    if True:\n        import pkg.g\n")
    graph = import_graph(tmp_path)
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"], ["pkg.g", "pkg.h"]]
    assert graph["pkg.d"] == set() and graph["pkg.e"] == {"pkg.a"} and graph["pkg.f"] == {"pkg.a"}


def test_design_md_draws_every_room_in_rank_order() -> None:
    design = (SRC.parents[1] / "docs" / "DESIGN.md").read_text()
    block = design.split("## Layers", 1)[1].split("```", 2)[1]
    first_row: dict[str, int] = {}
    for i, line in enumerate(block.strip().splitlines()):
        for word in line.split():
            if word in RANKS and line.index(word) < 30:  # the left column names the rooms
                first_row.setdefault(word, i)
    assert set(first_row) == set(RANKS)
    drawn = sorted(first_row, key=first_row.__getitem__)
    for upper, lower in itertools.pairwise(drawn):
        assert RANKS[upper] >= RANKS[lower], f"DESIGN.md draws {upper} above {lower}"


# ------------------------------------------------- function-level imports and plugins
# A function-level import hides an arrow from whoever reads the module's head, so each
# one says why it is there: `# lazy: <why>` on its line, or on the line above the run of
# imports it opens (e.g. `# lazy: keeps psycopg off this module's import`). Plugins (the
# rail distributions envelopay_solana, envelopay_base, ...) are found by entry points
# (`envelopay.rails`, `envelopay.payers`, `envelopay.devchains`), never imported by name.

LAZY_MARK = "# lazy:"
PLUGIN_PREFIX = "envelopay_"


def _explained(lines: list[str], node: ast.stmt, run_start: int) -> bool:
    own = lines[node.lineno - 1]
    above = lines[run_start - 2].strip() if run_start > 1 else ""
    marked = LAZY_MARK in own or above.startswith(LAZY_MARK)
    reason = (own.split(LAZY_MARK, 1)[1] if LAZY_MARK in own else above.removeprefix(LAZY_MARK)).strip()
    return marked and bool(reason)


def unexplained_lazy_imports(src: Path) -> list[str]:
    bad = []
    for path in sorted(src.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        run_start, previous_end = 0, -1
        for node in _function_imports(ast.parse(text)):
            if node.lineno != previous_end + 1:
                run_start = node.lineno  # a new run of consecutive imports
            previous_end = node.end_lineno or node.lineno
            if not _explained(lines, node, run_start):
                bad.append(f"{path.relative_to(src)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return bad


def plugin_imports(src: Path) -> list[str]:
    return [
        f"{path.relative_to(src)} imports {name}"
        for path in sorted(src.rglob("*.py"))
        for name in sorted(_imports(path))
        if name.startswith(PLUGIN_PREFIX)
    ]


# Files another hand is rewriting right now (issue 28, item 1: the enforcer as rooms);
# their function-level imports get their reasons there. Remove an entry as it lands.
PENDING_LAZY: set[str] = set()


def test_every_function_level_import_says_why() -> None:
    assert [bad for bad in unexplained_lazy_imports(SRC) if bad.split(":")[0] not in PENDING_LAZY] == []


def test_no_plugin_is_imported_by_name() -> None:
    assert plugin_imports(SRC) == []


def test_lazy_import_checker_sees_an_unexplained_import(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "def ok() -> None:\n"
        "    import json  # lazy: only this path\n"
        "    # lazy: keeps psycopg off this module's import\n"
        "    import psycopg\n"
        "    from psycopg import sql\n"
        "\n"
        "    import psycopg_pool\n"
        "def typed() -> None:\n"
        "    if TYPE_CHECKING:\n"
        "        import sqlite3\n"
        "def bare() -> None:\n"
        "    # lazy:\n"
        "    import os\n"
        "    from envelopay_solana import local\n"
    )
    assert unexplained_lazy_imports(tmp_path) == [
        "m.py:8: import psycopg_pool",
        "m.py:14: import os",
        "m.py:15: from envelopay_solana import local",
    ]
    assert plugin_imports(tmp_path) == ["m.py imports envelopay_solana"]


# ------------------------------------------------------------ the enforcer's rooms
# enforcer/ is rooms of its own (docs/DESIGN.md's layout), top down: the service (HTTP,
# console, launch), the clients (HTTP, MCP), the spend side, the send side, and what both
# sides stand on. Each imports only the rooms below it; the spend side reaches the send
# side through its public names only (test_private_imports checks rooms, this the ranks).
ENFORCER_RANKS = {"service": 4, "client": 3, "spend": 2, "send": 1, "common": 0}


def _enforcer_violations(enforcer: Path) -> list[str]:
    bad = []
    for path in sorted(enforcer.rglob("*.py")):
        rel = path.relative_to(enforcer)
        if len(rel.parts) == 1:
            if rel.name != "__init__.py":
                bad.append(f"{rel}: a module outside the enforcer's rooms")
            continue  # the package facade re-exports the public names
        room = rel.parts[0]
        if room not in ENFORCER_RANKS:
            bad.append(f"{rel}: room {room!r} has no rank")
            continue
        for name in sorted(_imports(path)):
            parts = name.split(".")
            if parts[:2] != ["envelopay", "enforcer"]:
                continue
            other = parts[2] if len(parts) > 2 else ""
            if other == room:
                continue
            if other not in ENFORCER_RANKS or ENFORCER_RANKS[other] >= ENFORCER_RANKS[room]:
                bad.append(f"{rel} ({room}) imports {name}")
    return bad


def test_enforcer_rooms_import_only_rooms_below() -> None:
    rooms = {p.name for p in (SRC / "enforcer").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(ENFORCER_RANKS)
    assert _enforcer_violations(SRC / "enforcer") == []


def test_enforcer_rank_checker_sees_an_upward_import(tmp_path: Path) -> None:
    (tmp_path / "send").mkdir()
    (tmp_path / "send" / "x.py").write_text("def f():\n    from envelopay.enforcer.spend.store import S\n")
    (tmp_path / "spend").mkdir()
    (tmp_path / "spend" / "y.py").write_text("from envelopay.enforcer import send\n")
    (tmp_path / "flat.py").write_text("")
    assert _enforcer_violations(tmp_path) == [
        "flat.py: a module outside the enforcer's rooms",
        "send/x.py (send) imports envelopay.enforcer.spend.store",
        "spend/y.py (spend) imports envelopay.enforcer",
    ]
