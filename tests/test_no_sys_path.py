"""No file under tests/ touches the import path (issue 28 item 8): a helper is imported by
its package name (`from tests.worker import _jobs_kit`), a task handler is named the same
way (`tests.worker._jobs_kit:nap`), and a child process runs a helper as
`python -m tests.<area>.<module>` from the repository root. A sys.path edit would let a
test find a sibling module only because of the folder it was started from — and leak that
path to every test after it in the process.

Reading sys.path counts too: handing it to a child (PYTHONPATH) is the same edit made in
another process. A child that needs the root names it (PYTHONPATH=<root>, or cwd=<root>)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

# path (from the repository root) -> why it may: each must still need it (checked below)
ALLOWED: dict[str, str] = {
    # The fork server runs a script as `python SCRIPT` would, and Python itself puts the
    # script's folder first on the path: it reproduces the interpreter's rule, not a lookup.
    "tests/_zygote.py": "runs SCRIPT as `python SCRIPT` would (its folder first on sys.path)",
}


def path_edits(source: str) -> list[int]:
    """The lines of `source` that name sys.path (however `sys` is imported), import `path`
    from sys, or add a site folder."""
    tree = ast.parse(source)
    sys_names = {"sys"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names.update(a.asname for a in node.names if a.name == "sys" and a.asname)
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            on_sys = node.attr == "path" and isinstance(node.value, ast.Name) and node.value.id in sys_names
            if on_sys or node.attr == "addsitedir":
                lines.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = {(node.module, a.name) for a in node.names}
            if names & {("sys", "path"), ("site", "addsitedir")}:
                lines.add(node.lineno)
    return sorted(lines)


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_file_under_tests_touches_the_import_path() -> None:
    found = []
    for path in _test_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ALLOWED:
            found += [f"{rel}:{line}" for line in path_edits(path.read_text())]
    assert found == [], "import helpers as tests.<area>.<module>; run children with python -m from the root"


def test_each_allowed_file_still_needs_it() -> None:
    """An exemption that is no longer used goes, so it cannot cover a new edit later."""
    for rel in ALLOWED:
        assert path_edits((ROOT / rel).read_text()) != [], f"{rel} no longer touches sys.path: drop it"


def test_the_check_sees_each_way_of_touching_it() -> None:
    touching = {
        "import sys\nsys.path.insert(0, 'x')\n": [2],
        "import sys\nsys.path[:0] = ['x']\n": [2],
        "import sys\nsys.path += ['x']\n": [2],
        "def f() -> None:\n    import sys\n\n    sys.path.remove('x')\n": [4],
        "import sys as s\ns.path.append('x')\n": [2],
        "from sys import path\npath.append('x')\n": [1],
        "import site\nsite.addsitedir('x')\n": [2],
        "from site import addsitedir\n": [1],
        "import os, sys\nenv = {'PYTHONPATH': os.pathsep.join(sys.path)}\n": [2],
    }
    for source, lines in touching.items():
        assert path_edits(source) == lines, source
    clean = [
        "import os\nos.path.join('a', 'b')\n",
        "from pathlib import Path\nPath('x').parent\n",
        "'''never through sys.path'''\n# nor sys.path.insert\n",
        "from tests.worker import _jobs_kit as jk\n",
        "env = {'PYTHONPATH': '/repo'}\n",
        "class C:\n    path = 'x'\nC.path\n",
    ]
    for source in clean:
        assert path_edits(source) == [], source
