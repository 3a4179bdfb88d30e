"""`envelopay order --wait` prints its lines in the order things happened (the client CLI
against a worker served by `serve_worker`, embedded garden, as test_cli_client's): a
message's `sent` line (and `paid`, for a PAY) as it leaves, before the WAITs about its job
that come in (stderr, as they come) and the answer; stdout holds the report's lines,
each once, as before."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli_client import WORKER, pair, pair_rpc  # noqa: F401  (fixtures)
from typer.testing import CliRunner, Result

from envelopay.cli.app import app

runner = CliRunner()


def _lines(res: Result) -> list[str]:
    """What a person reads on the terminal: stdout and stderr in the order written."""
    return res.output.splitlines()


def _order(ccfg: Path, task: str, *flags: str) -> tuple[Result, list[str]]:
    """`envelopay order WORKER --task TASK FLAGS`, done: its result and the lines a person reads."""
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), *flags, "--timeout", "60"])
    assert res.exit_code == 0, res.output
    return res, _lines(res)


def _at(lines: list[str], start: str) -> int:
    found = [i for i, line in enumerate(lines) if line.startswith(start)]
    assert len(found) == 1, (start, lines)
    return found[0]


def test_the_sent_line_comes_before_the_job_states(pair: tuple[Path, Path]) -> None:  # noqa: F811
    res, lines = _order(pair[1], '{"name": "digest", "text": "abc"}', "--wait")
    sent, queued = _at(lines, "sent ORDER "), _at(lines, "job queued (")
    assert sent < queued < _at(lines, "job: queued") < _at(lines, "received FULFILL "), lines
    out = res.stdout.splitlines()
    assert out[0].startswith("sent ORDER ") and out[1] == "job: queued → running", out
    assert out[2].startswith("received FULFILL "), out


def test_order_pay_says_sent_pay_before_the_pays_job_states(pair_rpc: tuple[Path, Path]) -> None:  # noqa: F811
    task = '{"name": "word_count", "text": "one two three", "rail": "base-local/USDC"}'
    res, lines = _order(pair_rpc[1], task, "--pay")
    order, invoice = _at(lines, "sent ORDER "), _at(lines, "received INVOICE ")
    pay, paid, queued = _at(lines, "sent PAY "), _at(lines, "paid 0.25 USDC"), _at(lines, "job queued (")
    assert order < invoice < pay < paid < queued < _at(lines, "received FULFILL "), lines
    out = res.stdout.splitlines()
    firsts = [line.split(" ", 2)[:2] for line in out[:3]]
    assert firsts == [["sent", "ORDER"], ["sent", "PAY"], ["paid", "0.25"]], out
