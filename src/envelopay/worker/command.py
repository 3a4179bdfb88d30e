"""A command task: an operator's program run as a handler, with least capability.

The command is an argv list from the operator's config, never a shell string; nothing a
buyer sends reaches the argv. The task's validated fields go in as JSON on stdin and
the result comes back as JSON on stdout, read as data (bounded in size, decoded by the
one reader of outside JSON). The process runs:

- in a session of its own (start_new_session): at the time limit, and after it exits,
  its whole process group is killed, so a child it left behind dies with it;
- under an address-space limit (RLIMIT_AS, set between fork and exec);
- with only the environment the config gives (nothing of the worker's, no keys);
- in a fresh working folder of its own, removed afterwards.

Every failure is a value (`TaskError` task_failed with a short reason), never a raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import signal
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.outside_json import OutsideJsonError, loads
from envelopay.worker.tasks import MAX_RESULT_BYTES, TaskError

__all__ = ["CommandSpec", "run_command"]

_CHUNK = 65536
_STDERR_KEPT = 2048


@dataclass(frozen=True, slots=True)
class CommandSpec:
    argv: tuple[str, ...]
    time_limit: float
    memory_mb: int = 2048
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""  # where the per-run folders are made ("" = the system's temp folder)
    max_output: int = MAX_RESULT_BYTES


def _limits(memory_mb: int) -> Callable[[], None]:
    cap = memory_mb * 1024 * 1024

    def preexec() -> None:  # runs in the child, between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return preexec


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _read_bounded(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, bool]:
    """Up to `limit` bytes; True when the stream had more (the rest is drained unread)."""
    buf = bytearray()
    over = False
    while chunk := await stream.read(_CHUNK):
        if len(buf) + len(chunk) > limit:
            over = True
            buf += chunk[: limit - len(buf)]
            continue  # keep draining so the child never blocks on a full pipe
        buf += chunk
    return bytes(buf), over


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()


async def _spawn(spec: CommandSpec, cwd: str) -> asyncio.subprocess.Process | TaskError:
    try:
        return await asyncio.create_subprocess_exec(
            *spec.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, cwd=cwd, env=dict(spec.env), start_new_session=True,
            preexec_fn=_limits(spec.memory_mb), close_fds=True,
        )
    except OSError as exc:
        return TaskError(OopsCode.TASK_FAILED, f"command could not start: {type(exc).__name__}")


async def run_command(spec: CommandSpec, fields: Mapping[str, Any], name: str = "task") -> Any | TaskError:
    """Run the command once with `fields` on stdin; its JSON result, or why not."""
    cwd = tempfile.mkdtemp(prefix=f"ep-{name}-", dir=spec.workdir or None)
    try:
        proc = await _spawn(spec, cwd)
        if isinstance(proc, TaskError):
            return proc
        return await _supervise(proc, spec, fields, name)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


async def _supervise(
    proc: asyncio.subprocess.Process, spec: CommandSpec, fields: Mapping[str, Any], name: str
) -> Any | TaskError:
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    data = json.dumps(dict(fields), ensure_ascii=False).encode()
    work = asyncio.gather(
        _feed(proc.stdin, data), _read_bounded(proc.stdout, spec.max_output),
        _read_bounded(proc.stderr, _STDERR_KEPT), proc.wait(),
    )
    try:
        _, (out, over), _, code = await asyncio.wait_for(work, spec.time_limit)
    except TimeoutError:
        _kill_group(proc.pid)
        with contextlib.suppress(ProcessLookupError):
            await proc.wait()
        return TaskError(OopsCode.TASK_FAILED, f"task {name} passed its time limit ({spec.time_limit:g} s)")
    finally:
        _kill_group(proc.pid)  # whatever it left running in its group goes with it
    return _result(name, code, out, over)


def _result(name: str, code: int, out: bytes, over: bool) -> Any | TaskError:
    if code != 0:
        why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        return TaskError(OopsCode.TASK_FAILED, f"task {name} failed: {why}")
    if over:
        return TaskError(OopsCode.TASK_FAILED, f"task {name} result is too large")
    try:
        return loads(out)
    except OutsideJsonError as exc:
        return TaskError(OopsCode.TASK_FAILED, f"task {name} printed no JSON result ({exc.code})")
