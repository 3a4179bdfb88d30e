"""Command tasks: an argv (never a shell), fields as JSON on stdin, the result as JSON on
stdout, a time limit that kills the whole process group, a memory limit, a clean
environment and a working folder of its own. Real processes, no mocks."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envelopay.errors import ConfigError
from envelopay.worker.command import CommandSpec, run_command
from envelopay.worker.tasks import TaskError

# A handler's own process imports tests.worker._jobs_kit from the repository root, named
# in its environment: the worker hands it its sys.path, which under `pytest` (not
# `python -m pytest`) lacks the root; pytest makes `tests` importable in-process only.
KIT_PATH = {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}


def _py(code: str, **kw: Any) -> CommandSpec:
    kw.setdefault("time_limit", 10.0)
    return CommandSpec(argv=(sys.executable, "-c", code), **kw)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_command_that_sleeps_answers_its_json() -> None:
    code = ("import json, sys, time; f = json.load(sys.stdin); time.sleep(f['seconds']);"
            " print(json.dumps({'got': f, 'words': len(f['text'].split())}))")
    out = await run_command(_py(code), {"seconds": 0.3, "text": "a b c"}, "nap")
    assert out == {"got": {"seconds": 0.3, "text": "a b c"}, "words": 3}


async def test_a_command_past_its_limit_is_killed_with_its_child(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = ("import os, subprocess, sys, time;"
            " c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
            f" open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{c.pid}}');"
            " time.sleep(60)")
    started = time.monotonic()
    out = await run_command(_py(code, time_limit=1.0), {}, "stuck")
    assert isinstance(out, TaskError) and out.code.value == "task_failed"
    assert "time limit" in out.detail and time.monotonic() - started < 10
    parent, child = (int(x) for x in pids.read_text().split())
    deadline = time.monotonic() + 5
    while (_alive(parent) or _alive(child)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(parent) and not _alive(child)


@pytest.mark.parametrize("printed", ["not json at all", "{\"a\": NaN}", "{\"a\": 1} trailing", ""])
async def test_a_command_printing_garbage_fails_the_task(printed: str) -> None:
    out = await run_command(_py(f"print({printed!r})"), {}, "garbage")
    assert isinstance(out, TaskError) and out.code.value == "task_failed"
    assert "no JSON result" in out.detail


async def test_output_is_bounded_and_exit_status_counts() -> None:
    big = await run_command(_py("import sys; sys.stdout.write('[' + '1,' * 400000 + '1]')"), {}, "big")
    assert isinstance(big, TaskError) and "too large" in big.detail
    bad = await run_command(_py("import sys; print('{}'); sys.exit(3)"), {}, "bad")
    assert isinstance(bad, TaskError) and "exit status 3" in bad.detail


async def test_environment_folder_and_memory_are_the_commands_own(tmp_path: Path) -> None:
    os.environ["EP_SECRET_FOR_TEST"] = "must-not-leak"
    try:
        code = "import json, os; print(json.dumps({'env': dict(os.environ), 'cwd': os.getcwd()}))"
        out = await run_command(_py(code, env={"ONLY": "this"}, workdir=str(tmp_path)), {}, "env")
    finally:
        del os.environ["EP_SECRET_FOR_TEST"]
    assert isinstance(out, dict)
    assert {k: v for k, v in out["env"].items() if k != "LC_CTYPE"} == {"ONLY": "this"}
    cwd = Path(out["cwd"])
    assert cwd.parent == tmp_path and not cwd.exists()  # its own folder, removed afterwards
    hog = await run_command(_py("x = bytearray(512 * 1024 * 1024); print(1)", memory_mb=128), {}, "hog")
    assert isinstance(hog, TaskError) and "exit status 1" in hog.detail


async def test_a_missing_program_is_a_value_and_config_wants_one_handler() -> None:
    out = await run_command(CommandSpec(argv=("/nonexistent/tool",), time_limit=5), {}, "gone")
    assert isinstance(out, TaskError) and "could not start" in out.detail
    from tests.worker._jobs_kit import config  # a task with both, or neither, is refused when loaded

    with pytest.raises(ConfigError, match="either handler"):
        config({"name": "t", "handler": "tests.worker._jobs_kit:nap", "command": ["x"],
                "schema": "tests.worker._jobs_kit:Nap"})
    with pytest.raises(ConfigError, match="either handler"):
        config({"name": "t", "schema": "tests.worker._jobs_kit:Nap"})
    true = config({"name": "t", "command": ["/bin/true"], "schema": "tests.worker._jobs_kit:Nap"})
    assert json.dumps(true.tasks[0].command) == '["/bin/true"]'


async def test_a_python_handler_in_a_process_of_its_own_is_killed_at_its_limit() -> None:
    """`process = true`: the handler runs as a command does — answers its JSON, and a
    sync handler that sleeps past its limit is killed (a thread could not be)."""
    from tests.worker._jobs_kit import config

    from envelopay.worker.execute import execute
    from envelopay.worker.tasks import TaskBook

    def nap(limit: float) -> TaskBook:
        return TaskBook.from_config(config({"name": "nap", "handler": "tests.worker._jobs_kit:nap_sync",
                                            "schema": "tests.worker._jobs_kit:Nap", "process": True,
                                            "time_limit": limit, "env": KIT_PATH}))

    quick = nap(60).resolve({"name": "nap", "seconds": 0.1})  # the limit covers a fresh interpreter's start
    assert not isinstance(quick, TaskError)
    assert await execute(quick) == {"slept": 0.1}
    stuck = nap(2).resolve({"name": "nap", "seconds": 60})
    assert not isinstance(stuck, TaskError)
    started = time.monotonic()
    out = await execute(stuck)
    assert isinstance(out, TaskError) and "time limit" in out.detail and time.monotonic() - started < 15
    boom = {"name": "nap", "handler": "tests.worker._jobs_kit:boom", "schema": "tests.worker._jobs_kit:Nap",
            "process": True, "env": KIT_PATH}
    broken = TaskBook.from_config(config(boom)).resolve({"name": "nap"})
    assert not isinstance(broken, TaskError)
    failed = await execute(broken)
    assert isinstance(failed, TaskError) and "exit status 1" in failed.detail
