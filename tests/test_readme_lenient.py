"""README's lenient-profile example prints what README says it prints, from any directory
(issue 30 item 5: its output differed from the text, and its fixture path worked only from
the repo root)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _example() -> tuple[list[str], str]:
    """The commands of the block before its `# {…}` output comment, and that output."""
    section = (ROOT / "README.md").read_text().split("#### The `lenient` interop profile", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("# {"):
            return commands, line[2:]
        commands.append(line)
    raise AssertionError("the lenient example shows no output")


def test_the_lenient_example_prints_what_readme_says_from_anywhere(tmp_path: Path) -> None:
    commands, says = _example()
    shim = tmp_path / "bin"
    shim.mkdir()
    for tool, run in (("envelopay", f"{sys.executable} -m envelopay.cli"), ("python", sys.executable)):
        (shim / tool).write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        (shim / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{shim}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    elsewhere = tmp_path / "elsewhere"  # not the clone: no fixtures/ here
    elsewhere.mkdir()
    done = subprocess.run(["bash", "-c", "set -eo pipefail\n" + "\n".join(commands)], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == says
