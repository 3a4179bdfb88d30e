"""Declared tasks: resolve an ORDER's `task` to a declared operation and run it.

An ORDER's task is data: ``{"name": "<declared task>", ...fields}``. The name picks one
of the operations the operator declared in the config; the remaining fields are
validated against that task's pydantic schema (unknown fields refused). Nothing received
is imported, executed or evaluated: the only code that runs is the handler the local
config named. Problems are values (an OOPS code and the field), never exceptions.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from envelopay.config import TaskConfig, WorkerConfig, resolve_ref
from envelopay.errors import ConfigError
from envelopay.protocol.codes import OopsCode

__all__ = ["MAX_RESULT_BYTES", "DeclaredTask", "TaskBook", "TaskError", "TaskRequest", "check_result"]

MAX_RESULT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class TaskError:
    """Why a task was refused or failed: an OOPS code, the field, a short detail."""

    code: OopsCode
    detail: str
    field: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code.value, "detail": self.detail}
        if self.field is not None:
            out["field"] = self.field
        return out


@dataclass(frozen=True, slots=True)
class DeclaredTask:
    config: TaskConfig
    schema: type[BaseModel]
    handler: Callable[[Any], Any] | None  # None: a command task (config.command)

    @property
    def name(self) -> str:
        return self.config.name


@dataclass(frozen=True, slots=True)
class TaskRequest:
    """A validated request for one declared task."""

    task: DeclaredTask
    params: BaseModel


def _beside_config(cfg: WorkerConfig, t: TaskConfig) -> TaskConfig:
    """A command's `./name` arguments and its `workdir` are relative to the config's folder
    (the command itself runs in a fresh folder, where `./name` would find nothing)."""
    argv = tuple(str(cfg.path(a)) if a.startswith("./") else a for a in t.command)
    workdir = str(cfg.path(t.workdir)) if t.workdir else ""
    return t.model_copy(update={"command": argv, "workdir": workdir})


def _check_schema(ref: str, obj: Any) -> type[BaseModel]:
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        raise ConfigError(f"{ref!r} is not a pydantic model class")
    return obj


class TaskBook:
    """The worker's catalogue: name → (schema, handler, price)."""

    def __init__(self, tasks: Mapping[str, DeclaredTask]) -> None:
        self._tasks = dict(tasks)

    @classmethod
    def from_config(cls, cfg: WorkerConfig) -> TaskBook:
        tasks: dict[str, DeclaredTask] = {}
        for t in cfg.tasks:
            schema = _check_schema(t.schema_ref, resolve_ref(t.schema_ref))
            if t.command:
                tasks[t.name] = DeclaredTask(_beside_config(cfg, t), schema, None)
                continue
            handler = resolve_ref(t.handler)
            if not callable(handler):
                raise ConfigError(f"task {t.name}: handler {t.handler!r} is not callable")
            tasks[t.name] = DeclaredTask(t, schema, handler)
        return cls(tasks)

    def names(self) -> tuple[str, ...]:
        return tuple(self._tasks)

    def get(self, name: str) -> DeclaredTask | None:
        return self._tasks.get(name)

    def resolve(self, task: Any) -> TaskRequest | TaskError:
        """Turn an ORDER/WHICH `task` value into a validated request, or say why not."""
        if isinstance(task, str):
            # A bare string may name a task that needs no fields.
            name, fields = task.strip(), {}
        elif isinstance(task, dict):
            raw_name = task.get("name")
            if not isinstance(raw_name, str):
                return TaskError(OopsCode.INVALID_FIELD, "task.name must name a declared task", "task.name")
            name = raw_name
            fields = {k: v for k, v in task.items() if k != "name"}
        else:
            return TaskError(OopsCode.INVALID_FIELD, "task must be an object or a task name", "task")
        declared = self._tasks.get(name)
        if declared is None:
            known = ", ".join(sorted(self._tasks)) or "none"
            detail = f"no task named {name[:64]!r}; declared: {known}"
            return TaskError(OopsCode.UNKNOWN_TASK, detail, "task.name")
        try:
            params = declared.schema.model_validate(fields)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            path = f"task.{where}" if where else "task"
            return TaskError(OopsCode.INVALID_FIELD, f"{path}: {err['msg']}", path)
        return TaskRequest(declared, params)

    async def run(self, request: TaskRequest) -> Any | TaskError:
        """Run a Python handler inline (a command task is run by envelopay.worker.execute);
        its result must be JSON data."""
        handler = request.task.handler
        if handler is None:
            return TaskError(OopsCode.TASK_FAILED, f"task {request.task.name} is a command: run it as a job")
        try:
            result = handler(request.params)
            if inspect.isawaitable(result):
                result = await _await(result)
        except Exception as exc:  # the handler is operator code; its failure is a value to the buyer
            return TaskError(OopsCode.TASK_FAILED, f"task {request.task.name} failed: {type(exc).__name__}")
        return check_result(request.task.name, result)


def check_result(name: str, result: Any) -> Any | TaskError:
    """A handler's result as JSON data, or task_failed: not JSON, or too large."""
    if isinstance(result, TaskError):
        return result
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json")
    try:
        encoded = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError):
        return TaskError(OopsCode.TASK_FAILED, f"task {name} returned non-JSON data")
    if len(encoded) > MAX_RESULT_BYTES:
        return TaskError(OopsCode.TASK_FAILED, f"task {name} result is too large")
    return result


async def _await(x: Awaitable[Any]) -> Any:
    return await x
