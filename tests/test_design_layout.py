"""docs/DESIGN.md's "Package layout" names every module under src/envelopay, and nothing
that is gone (issue 28: the layout had missed 24 modules).

How the layout is read: an entry is a line indented two spaces that starts with a room,
`name/` (a package) or `name.py` (a module), and runs until the next such line. In a
package's entry every word outside parentheses is one of its modules (`word`) or
subpackages (`word/`); the words after `word/` belong to that subpackage until the next
`word/` of the same entry (a package's `__init__.py` needs no naming). What a module is for goes in
parentheses beside it, and so may any prose.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "envelopay"
DESIGN = ROOT / "docs" / "DESIGN.md"

_ENTRY = re.compile(r"^  ([A-Za-z_][A-Za-z0-9_]*)(/|\.py)(?=\s|$)(.*)$")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*/?")


def _layout_block(text: str) -> list[str]:
    section = text.split("## Package layout", 1)[1]
    block = section.split("```", 2)[1]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "src/envelopay/")
    out = []
    for line in lines[start + 1 :]:
        if line and not line.startswith(" "):
            break  # the next top-level path (rails/, fixtures/, …)
        out.append(line)
    return out


def _without_parentheses(text: str) -> str:
    depth, kept = 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            kept.append(ch)
    return "".join(kept)


def documented(text: str) -> set[str]:
    """The modules and packages the layout names, as paths under src/envelopay
    (`protocol/parse.py`, `enforcer/send/`)."""
    entries: list[tuple[str, str, str]] = []
    for line in _layout_block(text):
        m = _ENTRY.match(line)
        if m:
            entries.append((m.group(1), m.group(2), m.group(3)))
        elif entries and line.strip():
            name, kind, rest = entries[-1]
            entries[-1] = (name, kind, f"{rest} {line}")
    named: set[str] = set()
    for name, kind, rest in entries:
        if kind == ".py":
            named.add(f"{name}.py")
            continue
        named.add(f"{name}/")
        prefix = f"{name}/"
        for word in _WORD.findall(_without_parentheses(rest)):
            if word.endswith("/"):
                prefix = f"{name}/{word}"
                named.add(prefix)
            else:
                named.add(f"{prefix}{word}.py")
    return named


def on_disk(src: Path) -> set[str]:
    """Every module and package under src/envelopay, the same way (a package's
    __init__.py is its `name/`; the top-level one is a line of its own)."""
    found: set[str] = set()
    for path in src.rglob("*.py"):
        rel = path.relative_to(src)
        if "__pycache__" in rel.parts:
            continue
        for i in range(1, len(rel.parts)):
            found.add("/".join(rel.parts[:i]) + "/")
        if rel.name != "__init__.py" or len(rel.parts) == 1:
            found.add(rel.as_posix())
    return found


def _advice(missing: set[str], gone: set[str]) -> list[str]:
    lines = []
    for path in sorted(missing):
        room, _, rest = path.rstrip("/").rpartition("/")
        what = f"`{rest}/`" if path.endswith("/") else f"`{Path(rest).stem} (what it is for)`"
        top, _, sub = room.partition("/")
        where = ("a line of its own, indented two spaces" if not room
                 else f"the `{top}/` entry" + (f", after its `{sub}/` word" if sub else ""))
        lines.append(f"src/envelopay/{path} is not in docs/DESIGN.md's Package layout: add {what} to {where}")
    lines += [f"docs/DESIGN.md's Package layout names src/envelopay/{path}, which does not exist: remove "
              "it (or put prose in parentheses)" for path in sorted(gone)]
    return lines


def test_the_layout_names_every_module_and_nothing_that_is_gone() -> None:
    named, there = documented(DESIGN.read_text()), on_disk(SRC)
    advice = _advice(there - named, named - there)
    assert not advice, "\n" + "\n".join(advice)


def test_the_reader_of_the_layout(tmp_path: Path) -> None:
    text = "\n".join([
        "## Package layout", "", "```", "pyproject.toml", "src/envelopay/",
        "  errors.py          the error tree (prose here is free)",
        "  mail/              maildir (Maildir, atomic writes)  smtp",
        "                     mailbox/ actions (Mailbox) guard",
        "  enforcer/          send/ store policy  spend/ store (the spend store)",
        "rails/solana/        a plugin, not read", "```",
    ])
    assert documented(text) == {
        "errors.py", "mail/", "mail/maildir.py", "mail/smtp.py", "mail/mailbox/",
        "mail/mailbox/actions.py", "mail/mailbox/guard.py", "enforcer/", "enforcer/send/",
        "enforcer/send/store.py", "enforcer/send/policy.py", "enforcer/spend/", "enforcer/spend/store.py",
    }
    src = tmp_path / "envelopay"
    for rel in ("__init__.py", "errors.py", "mail/__init__.py", "mail/maildir.py", "mail/imap.py"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("")
    assert on_disk(src) == {"__init__.py", "errors.py", "mail/", "mail/maildir.py", "mail/imap.py"}
    advice = _advice({"mail/imap.py", "enforcer/send/mime.py"}, {"mail/smtp.py"})
    assert advice == [
        "src/envelopay/enforcer/send/mime.py is not in docs/DESIGN.md's Package layout: add "
        "`mime (what it is for)` to the `enforcer/` entry, after its `send/` word",
        "src/envelopay/mail/imap.py is not in docs/DESIGN.md's Package layout: add "
        "`imap (what it is for)` to the `mail/` entry",
        "docs/DESIGN.md's Package layout names src/envelopay/mail/smtp.py, which does not exist: "
        "remove it (or put prose in parentheses)",
    ]
