"""The documents users read stay in step with the code: every OOPS code and rail
reason is specified in SPEC.md, every CLI command is shown in README.md."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import typer.main

from envelopay.cli.app import app
from envelopay.protocol.codes import OopsCode
from envelopay.rails.interface import REASON_TO_OOPS, Reason

ROOT = Path(__file__).resolve().parents[1]
SPEC = (ROOT / "SPEC.md").read_text()
README = (ROOT / "README.md").read_text()


def test_every_oops_code_is_in_spec() -> None:
    missing = [c.value for c in OopsCode if f"`{c.value}`" not in SPEC]
    assert missing == []


def test_every_rail_reason_is_in_spec_and_maps_to_an_oops_code() -> None:
    assert set(REASON_TO_OOPS) == set(Reason)
    missing = [r.value for r in Reason if f"`{r.value}`" not in SPEC]
    assert missing == []


def test_every_cli_command_appears_in_readme() -> None:
    group = typer.main.get_command(app)
    names = sorted(group.commands)  # type: ignore[attr-defined]
    assert len(names) > 20
    missing = [n for n in names if f"envelopay {n}" not in README and n != "version"]
    assert missing == []


def test_quickstart_commands_exist_in_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "make demo" in README and "make test" in README
    assert "\ndemo:" in makefile and "\ntest:" in makefile
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci


def test_quickstart_puts_the_venv_on_path() -> None:
    """Usage types bare `envelopay`; Quickstart says once where it lives (issue 30 item 5),
    and the line it gives really finds the venv's command."""
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    line = re.search(r"^\. \.venv/bin/activate\b.*$", quickstart, re.M)
    assert line is not None, "Quickstart never says `. .venv/bin/activate`"
    found = subprocess.run(["bash", "-c", ". .venv/bin/activate && command -v envelopay"], cwd=ROOT,
                           capture_output=True, text=True, check=False)
    assert found.stdout.strip() == str(ROOT / ".venv" / "bin" / "envelopay")


def test_no_runnable_readme_line_hard_codes_a_date() -> None:
    """A date written into an example passes only while the clock agrees with it (issue 30
    item 5): the README test must pass on any date, so examples compute theirs from now."""
    from tests import readme_run as rr  # the README test's reader

    dated = [f"README.md:{line.number}: {line.code}" for block in rr.blocks() for line in block.lines
             if not line.syntax and re.search(r"\b(19|20)\d\d-\d\d-\d\d", line.code)]
    assert dated == []
