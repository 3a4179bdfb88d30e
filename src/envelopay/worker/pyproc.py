"""A Python handler in a process of its own (`process = true` on its task): run as a
command is — fields as JSON on stdin, the result as JSON on stdout, the time limit killing
its process group, the memory limit — so a handler that hangs or runs away can be stopped,
which a thread cannot.

    python -m envelopay.worker.pyproc module:handler module:Schema

The handler and schema are the operator's, named by the config (never by a message).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from typing import Any

from pydantic import BaseModel

from envelopay.config import resolve_ref

__all__ = ["main", "run_once"]


def run_once(handler_ref: str, schema_ref: str, fields: Any) -> Any:
    """The handler's result for `fields` (validated by the schema), as JSON data."""
    schema = resolve_ref(schema_ref)
    handler = resolve_ref(handler_ref)
    result = handler(schema.model_validate(fields))
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result.model_dump(mode="json") if isinstance(result, BaseModel) else result


async def _await(x: Any) -> Any:
    return await x


def main() -> None:
    handler_ref, schema_ref = sys.argv[1], sys.argv[2]
    result = run_once(handler_ref, schema_ref, json.load(sys.stdin))
    sys.stdout.write(json.dumps(result, allow_nan=False))


if __name__ == "__main__":
    main()
