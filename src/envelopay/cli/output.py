"""How every command answers: one error helper with the exit-code table, one printer
that shows either a JSON document or a readable table.

Exit codes (README "Exit codes"): 0 ok; 1 the peer or the chain said no, or a timeout;
2 bad input, nothing sent and nothing paid; 3 the environment is at fault (a wallet
short of funds, the transport or RPC unreachable, a configuration error).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

import typer

from envelopay.errors import ConfigError, RailError, Refused, TransportError, UsageError

OK = 0
FAILED = 1
USAGE = 2
ENVIRONMENT = 3


def fail(
    message: str,
    code: int = USAGE,
    *,
    as_json: bool = False,
    error: str = "usage",
    field: str | None = None,
) -> NoReturn:
    """End the command: `error: MESSAGE` on stderr (and, with --json, one error document
    on stdout), then exit with `code`."""
    if as_json:
        typer.echo(json.dumps({"error": error, "field": field, "detail": message, "exit": code}))
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


_FIELD = re.compile(r"^(--[a-z][\w.-]*|[A-Z][A-Z_]+):")


def field_of(message: str) -> str | None:
    """The option or argument an error message starts with (`--amount: ...`, `ADDRESS: ...`)."""
    m = _FIELD.match(message)
    return m.group(1) if m else None


@contextmanager
def answers(
    *, transport: int | None = None, transport_prefix: str = "", as_json: bool = False,
    config: int = ENVIRONMENT,
) -> Iterator[None]:
    """The errors of the layers below as the CLI's answers: bad input → exit 2; the peer
    has not agreed → 1; a configuration error (→ `config`: 3, or 2 where the
    "configuration" is the command's own flags, as `--chain` of `verify`) or a rail that
    could not pay → 3; an unreachable transport → `transport` when given (else it
    propagates)."""
    try:
        yield
    except UsageError as exc:
        fail(str(exc), as_json=as_json, field=field_of(str(exc)))
    except ConfigError as exc:
        fail(str(exc), config, as_json=as_json, error="config", field=field_of(str(exc)))
    except Refused as exc:
        fail(str(exc), FAILED, as_json=as_json, error="refused")
    except RailError as exc:
        fail(str(exc), ENVIRONMENT, as_json=as_json, error=exc.reason)
    except TransportError as exc:
        if transport is None:
            raise
        fail(f"{transport_prefix}{exc}", transport, as_json=as_json, error="transport")


def emit(document: Any, *, indent: int | None = None, ensure_ascii: bool = True) -> None:
    """Print one JSON document on stdout."""
    typer.echo(json.dumps(document, indent=indent, ensure_ascii=ensure_ascii))


def emit_or_say(as_json: bool, document: Any, text: str) -> None:
    """The JSON document with --json, else one readable line."""
    if as_json:
        emit(document)
    else:
        typer.echo(text)


def table(
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    title: str | None = None,
    overflow: bool = False,
    width: int | None = None,
    empty: str | None = None,
) -> None:
    """A rich table on stdout; `overflow` folds long cells instead of cutting them."""
    from rich.console import Console
    from rich.table import Table

    out = Table(title=title)
    for col in columns:
        if overflow:
            out.add_column(col, overflow="fold")
        else:
            out.add_column(col)
    count = 0
    for row in rows:
        out.add_row(*row)
        count += 1
    console = Console(soft_wrap=False, width=width) if width is not None else Console()
    console.print(out)
    if empty is not None and count == 0:
        console.print(empty)


def next_page(token: str | None, command: str) -> None:
    """Under a page: how to get the next one (nothing after the last page)."""
    if token is not None:
        typer.echo(f"more: {command} --after {shlex.quote(token)}", err=True)
