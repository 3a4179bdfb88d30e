"""tests/_zygote.py, the fork server of the crash tests: its children are separate
processes that run the script as `python SCRIPT ARGS` would, with their own argv,
environment and pipes, die alone of a SIGKILL, and do not outlive the server."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from tests._zygote import PIPE, Zygote

SCRIPT = """
import json, os, sys, time

if __name__ == "__main__":
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv, "env": os.environ.get("ZYG_TEST")}
    print(json.dumps(seen), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if sys.argv[1] == "sleep":
        time.sleep(60)
    elif sys.argv[1] == "fail":
        raise ValueError("boom")
    sys.exit(int(sys.argv[2]))
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(SCRIPT)
    return path


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_children_run_the_script_as_main_with_their_argv_env_and_exit_code(script: Path) -> None:
    with Zygote(script) as z:
        env = {**os.environ, "ZYG_TEST": "one"}
        child = z.spawn(["exit", "3"], env=env, stdout=PIPE, stderr=PIPE)
        out, err = child.communicate(timeout=30)
        seen = json.loads(out)
        assert seen["pid"] == child.pid != os.getpid() and seen["ppid"] != os.getpid()  # the server's
        assert seen["argv"] == [str(script), "exit", "3"] and seen["env"] == "one"
        assert err == "to stderr\n" and child.returncode == 3
        other = z.spawn(["exit", "0"], stdout=PIPE, stderr=PIPE)  # our environment: no ZYG_TEST
        assert json.loads(other.communicate(timeout=30)[0])["env"] is None and other.returncode == 0
        failed = z.spawn(["fail", "0"], stdout=PIPE, stderr=PIPE)
        _, err = failed.communicate(timeout=30)
        assert failed.returncode == 1 and "ValueError: boom" in err


def test_sigkill_kills_the_child_alone_and_close_reaps_the_rest(script: Path) -> None:
    with Zygote(script) as z:
        a = z.spawn(["sleep", "0"], stdout=PIPE)
        b = z.spawn(["sleep", "0"], stdout=PIPE)
        assert a.stdout is not None and b.stdout is not None
        a.stdout.readline()
        b.stdout.readline()
        assert a.poll() is None
        a.send_signal(signal.SIGKILL)
        assert a.wait(timeout=30) == -signal.SIGKILL
        assert b.poll() is None and _alive(b.pid)  # its sibling runs on
        a.kill()  # already reaped: the server ignores it (no signal to a reused pid)
        with pytest.raises(ValueError):
            b.send_signal(signal.SIGTERM)
        a.stdout.close()
        b.stdout.close()
    deadline = time.monotonic() + 30
    while _alive(b.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(b.pid)  # the server killed it on the way out
