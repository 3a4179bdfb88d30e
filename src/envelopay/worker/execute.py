"""Run one declared task once, off the event loop, within its time limit.

A Python handler that is a coroutine function runs on the loop and is cancelled at the
limit; a plain function runs in a thread (a thread cannot be killed: at the limit the
attempt is failed and its thread left to finish on its own, its result ignored). A
command (envelopay.worker.command), or a Python handler declared `process = true`
(envelopay.worker.pyproc), runs as its own process group and is killed at the limit.
Whatever comes back is checked as data (JSON, bounded) before it is a result.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import sys
from concurrent.futures import Executor
from typing import Any

from envelopay.protocol.codes import OopsCode
from envelopay.worker.command import CommandSpec, run_command
from envelopay.worker.tasks import TaskError, TaskRequest, check_result

__all__ = ["command_spec", "execute"]


def command_spec(request: TaskRequest) -> CommandSpec:
    cfg = request.task.config
    argv, env = tuple(cfg.command), dict(cfg.env)
    if not argv:  # a Python handler in a process of its own: the worker's interpreter, its import path
        argv = (sys.executable, "-m", "envelopay.worker.pyproc", cfg.handler, cfg.schema_ref)
        env.setdefault("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    return CommandSpec(argv=argv, time_limit=cfg.time_limit, memory_mb=cfg.memory_mb, env=env,
                       workdir=cfg.workdir)


async def _python(request: TaskRequest, threads: Executor | None) -> Any:
    handler = request.task.handler
    assert handler is not None
    if inspect.iscoroutinefunction(handler):
        return await handler(request.params)
    result = await asyncio.get_running_loop().run_in_executor(threads, handler, request.params)
    if inspect.isawaitable(result):  # a plain function that hands back an awaitable
        result = await result
    return result


async def execute(request: TaskRequest, threads: Executor | None = None) -> Any | TaskError:
    """The task's result as JSON data, or task_failed with a short reason. A plain
    function runs on `threads` (the runner gives each task a pool of its concurrency, so
    sleeping handlers never take the threads the ledger calls use), else the loop's default."""
    name = request.task.name
    if request.task.config.command or request.task.config.process:
        fields = request.params.model_dump(mode="json")
        return check_result(name, await run_command(command_spec(request), fields, name))
    limit = request.task.config.time_limit
    try:
        result = await asyncio.wait_for(_python(request, threads), limit)
    except TimeoutError:
        return TaskError(OopsCode.TASK_FAILED, f"task {name} passed its time limit ({limit:g} s)")
    except Exception as exc:  # operator code: its failure is a value to the buyer
        return TaskError(OopsCode.TASK_FAILED, f"task {name} failed: {type(exc).__name__}")
    return check_result(name, result)
