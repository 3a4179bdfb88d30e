"""A list too wide for the terminal is printed one block per row (cli/output.py `table`):
on an 80-column terminal `envelopay jobs list` folded its columns to five letters
("revie/w", "buyer/@gard/en.lo/cal"); each value now stays whole on its own line."""

from __future__ import annotations

import pytest

from envelopay.cli.output import table

COLUMNS = ("JOB", "STATE", "TASK", "PAID", "PEER", "REFUND", "ERROR")
ROW = ("job_c0317ee3b20862341160", "held", "review", "0.25 USDC", "buyer@garden.local", "",
       "task review failed: exit status 1")


def test_too_wide_for_80_columns_each_row_is_a_block(capsys: pytest.CaptureFixture[str]) -> None:
    table(COLUMNS, [ROW, (*ROW[:1], "done", *ROW[2:])], width=80, whole=("JOB",))
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "job_c0317ee3b20862341160",
        "  STATE   held",
        "  TASK    review",
        "  PAID    0.25 USDC",
        "  PEER    buyer@garden.local",
        "  ERROR   task review failed: exit status 1",  # the empty REFUND is left out
        "",
        "job_c0317ee3b20862341160",
        "  STATE   done",
        "  TASK    review",
        "  PAID    0.25 USDC",
        "  PEER    buyer@garden.local",
        "  ERROR   task review failed: exit status 1",
    ]
    assert all(len(line) <= 80 for line in out.splitlines())


def test_wide_enough_it_is_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    table(COLUMNS, [ROW], width=200, title="jobs")
    out = capsys.readouterr().out
    assert "┃ JOB" in out and "│ job_c0317ee3b20862341160 │ held  │ review │" in out


def test_a_cell_of_several_lines_stays_under_its_name(capsys: pytest.CaptureFixture[str]) -> None:
    table(("ID", "NOTE"), [("a" * 70, "first line\nsecond line")], width=40, title="t")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["t", "a" * 70, "  NOTE  first line", "        second line"]


def test_no_rows_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    table(COLUMNS, [], width=80, empty="No jobs.")
    assert "No jobs." in capsys.readouterr().out
