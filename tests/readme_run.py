"""Reading README's Usage examples as shell sessions (issue 15), for tests/test_readme_examples.py.

Every `sh` block of the Usage part sits under a `<!-- readme-run: WORLD -->` comment. The
blocks of one world run in README order as ONE bash session (so `cd`, `export` and a
variable such as `INV=$(envelopay order … --json | jq -r .answer.id)` carry over, as they
would for a person typing them), each logical line checked for its exit code: 0, or N when
its comment says `exit N`. A line ending in `&` is a long-running service: the session
starts it in the background and goes on once it says it is listening or serving (each of
ours prints such a line when ready; waiting on it is a condition, not a guess). A line whose
comment says `(syntax)` shows syntax, not a command, and is not run. A world named
`tests/…` is a block another test runs as written.

The sessions run in `shell_env` (this file's and the tests that run a README block or a
script of their own through real processes: tests/worker/test_readme_jobs.py,
tests/worker/test_refund_served.py) by `run_session`, and `devnet_down` ends their devnet.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARK = re.compile(r"<!-- readme-run: (\S+) -->")


@dataclass(frozen=True)
class Line:
    number: int  # README line number of its first physical line
    text: str  # the logical line (continuations joined), comment included
    code: str  # without its comment
    comment: str
    expect: int  # the exit code README says it has
    background: bool  # a service the session starts with `&`
    syntax: bool  # shows syntax; not run


@dataclass(frozen=True)
class Block:
    world: str
    number: int  # README line number of the fence
    lines: tuple[Line, ...]


def usage_text(text: str | None = None) -> tuple[str, int]:
    """The Usage part (from "## Usage" to the next "## ") and the line number it starts at."""
    text = text if text is not None else README.read_text(encoding="utf-8")
    head, _, rest = text.partition("\n## Usage")
    usage = "## Usage" + rest.split("\n## ", 1)[0]
    return usage, head.count("\n") + 2


def split_comment(line: str) -> tuple[str, str]:
    """(code, comment): the comment starts at a `#` outside quotes after white space."""
    quote: str | None = None
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _line(number: int, text: str) -> Line:
    code, comment = split_comment(text.strip())
    exit_code = re.search(r"\bexits? (\d)\b", comment)
    background = code.endswith("&") and not code.endswith("&&")
    return Line(number, text.strip(), code[:-1].rstrip() if background else code, comment,
                int(exit_code.group(1)) if exit_code else 0, background, "(syntax)" in comment)


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced sh block of the Usage part, with the world its marker names ('' if none)."""
    usage, first = usage_text(text)
    out: list[Block] = []
    world, fence_at, pending, pending_at = "", 0, "", 0
    lines: list[Line] | None = None
    for idx, raw in enumerate(usage.splitlines()):
        number = first + idx
        mark = MARK.search(raw)
        if mark and lines is None:
            world = mark.group(1)
            continue
        if raw.startswith("```"):
            if lines is not None:
                out.append(Block(world, fence_at, tuple(lines)))
                lines, world = None, ""
            elif raw[3:].strip() in ("sh", "bash"):
                lines, fence_at = [], number
            else:  # another language (or its closing fence): nothing to collect
                world = ""
            continue
        if lines is None:
            continue
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if not pending:
            pending_at = number
        joined = pending + raw.strip()
        if joined.endswith("\\"):
            pending = joined[:-1] + " "
            continue
        pending = ""
        lines.append(_line(pending_at, joined))
    return out


def envelopay_argvs(line: Line) -> list[list[str]]:
    """The `envelopay …` commands in a line (also inside `$( … )` and after `;`/`&&`),
    each as its argv without the program name, pipes and redirections dropped."""
    out: list[list[str]] = []
    for m in re.finditer(r"(?:^|[\s(;&])envelopay\s", line.code):
        rest = line.code[m.end():]
        rest = re.split(r"\s(?:\||\|\||&&|;|>|<|2>)\s|\)|;", rest)[0]
        try:
            out.append(shlex.split(rest))
        except ValueError:
            out.append(rest.split())
    return out


def script(worlds_blocks: list[Block]) -> str:
    """One bash session for the blocks: each line run as written, then its exit code checked."""
    parts = ["set -o pipefail", "trap 'kill $(jobs -p) 2>/dev/null; wait' EXIT"]
    # A background line must be one simple command (exec replaces the job's subshell).
    for block in worlds_blocks:
        for line in block.lines:
            if line.syntax:
                continue
            where = f"README.md:{line.number}"
            if line.background:
                log = f".service-{line.number}.log"
                parts += [
                    f"echo '+ {where}: (background) ' {shlex.quote(line.code)} >&2",
                    # exec: $! is the service itself, so the EXIT trap's kill reaches it
                    f"{{ exec {line.code} ; }} > {log} 2>&1 &",
                    "__pid=$!; __t=0",
                    f"until grep -qiE 'listening|serving' {log}; do",
                    f"  kill -0 $__pid 2>/dev/null || {{ echo '{where}: service exited' >&2; cat {log} >&2; "
                    "exit 101; }",
                    "  __t=$((__t+1)); [ $__t -gt 1200 ] && { echo "
                    f"'{where}: service not listening after 120 s' >&2; cat {log} >&2; exit 101; }}",
                    "  sleep 0.1",
                    "done",
                ]
                continue
            parts += [
                f"echo \"+ ${{EPOCHREALTIME%????}} {where}:\" {shlex.quote(line.code)} >&2",
                line.code,
                "__rc=$?",
                f"if [ $__rc -ne {line.expect} ]; then echo '{where}: exit '$__rc', README says "
                f"{line.expect}' >&2; exit 100; fi",
            ]
    parts.append("echo '+ all README lines ran' >&2")
    return "\n".join(parts) + "\n"


def shell_env(tmp_path: Path) -> dict[str, str]:
    """The environment a session runs in: `envelopay` and `python` are this interpreter's
    (shims first on PATH: the venv a reader would have activated); HOME and the devnet's home
    are under `tmp_path` and the devnet's ports are left to the system, so concurrent runs
    never meet; PYTHONUNBUFFERED=1, so a background service's "listening" line shows when
    it is printed."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "envelopay").write_text(f'#!/bin/sh\nexec {sys.executable} -m envelopay.cli "$@"\n')
    (shim / "python").write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for tool in ("envelopay", "python"):
        (shim / tool).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENVELOPAY_")}
    env.update(PATH=f"{shim}:{env.get('PATH', '/usr/bin:/bin')}", HOME=str(tmp_path / "home"),
               ENVELOPAY_DEVNET_HOME=str(tmp_path / "devnet"), ENVELOPAY_DEVNET_SOLANA_PORT="0",
               ENVELOPAY_DEVNET_BASE_PORT="0", PYTHONUNBUFFERED="1", COLUMNS="120")
    (tmp_path / "home").mkdir()
    return env


@dataclass(frozen=True)
class Ran:
    returncode: int
    out: str  # stdout and stderr, interleaved
    timed_out: bool  # killed after the timeout: `out` is what it printed until then


def run_session(script_text: str, cwd: Path, env: dict[str, str], timeout: float) -> Ran:
    """`bash -c script_text` in a process group of its own; whatever it left running there
    (a service it started) ends with it, and so does all of it when it overruns `timeout`."""
    proc = subprocess.Popen(["bash", "-c", script_text], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    return Ran(proc.returncode, out, timed_out)


def devnet_down(cwd: Path, env: dict[str, str]) -> None:
    """`envelopay devnet down` for a session's devnet, whatever the session left of it."""
    subprocess.run([sys.executable, "-m", "envelopay.cli", "devnet", "down"], cwd=cwd, env=env,
                   capture_output=True, timeout=60)
