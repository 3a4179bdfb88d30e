"""How every command answers: the one table from error kinds to exit codes, the JSON
mode of an invocation, and one printer that shows either a JSON document or a table.

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
from contextvars import ContextVar
from typing import Any, NoReturn

import typer

from envelopay.errors import (
    ConfigError,
    EnvelopayError,
    RailError,
    Refused,
    StoreError,
    TransportError,
    UsageError,
)

OK = 0
FAILED = 1
USAGE = 2
ENVIRONMENT = 3

# The one mapping from an error kind to its exit code and the `error` word of its JSON
# document; the first kind that matches wins. README's exit-code table is this table.
EXIT_CODES: tuple[tuple[type[EnvelopayError], int, str], ...] = (
    (UsageError, USAGE, "usage"),  # incl. MailboxError: it carries its own code and field
    (Refused, FAILED, "refused"),
    (ConfigError, ENVIRONMENT, "config"),
    (RailError, ENVIRONMENT, "rail"),
    (TransportError, ENVIRONMENT, "transport"),
    (StoreError, ENVIRONMENT, "store"),
)

# Whether this invocation prints JSON: set by every command's --json (an eager option,
# so it is known before any other option can fail), reset by the root command per run.
_JSON: ContextVar[bool] = ContextVar("envelopay_cli_json", default=False)


def json_mode() -> bool:
    """Whether the running command was given --json."""
    return _JSON.get()


def set_json_mode(on: bool) -> bool:
    """Record --json for this invocation (the option's callback); returns `on`."""
    _JSON.set(on)
    return on


def exit_of(exc: EnvelopayError) -> tuple[int, str]:
    """The exit code and error word of an error kind (EXIT_CODES); unknown kinds: 3."""
    for kind, code, word in EXIT_CODES:
        if isinstance(exc, kind):
            if isinstance(exc, RailError):
                return code, exc.reason  # e.g. insufficient_funds
            return code, getattr(exc, "code", None) or word
    return ENVIRONMENT, "environment"


def fail(
    message: str,
    code: int = USAGE,
    *,
    as_json: bool | None = None,
    error: str = "usage",
    field: str | None = None,
) -> NoReturn:
    """End the command: `error: MESSAGE` on stderr (and, in JSON mode, one error document
    on stdout), then exit with `code`."""
    if json_mode() if as_json is None else as_json:
        typer.echo(json.dumps(error_document(message, code, error=error, field=field)))
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def error_document(
    message: str, code: int, *, error: str = "usage", field: str | None = None
) -> dict[str, Any]:
    """The JSON document of a failed command (schema: `error`)."""
    return {"error": error, "field": field if field is not None else field_of(message), "detail": message,
            "exit": code}


def fail_with(exc: EnvelopayError, *, prefix: str = "", as_json: bool | None = None,
              input_kinds: tuple[type[EnvelopayError], ...] = ()) -> NoReturn:
    """End the command with the exit code EXIT_CODES gives `exc`'s kind. `input_kinds`
    are kinds that, for this command, name its own flags (the rail `verify --chain`
    names): bad input, exit 2."""
    code, word = exit_of(exc)
    if input_kinds and isinstance(exc, input_kinds):
        code, word = USAGE, "usage"
    message = f"{prefix}{exc}" if isinstance(exc, TransportError) else str(exc)
    fail(message, code, as_json=as_json, error=word, field=getattr(exc, "field", None))


# A delivery refused for good: an SMTP/LMTP 5xx reply, a permanent failure, a kill switch.
_FOR_GOOD = re.compile(r"permanent|\b5\d\d\b|\b5\.\d+\.\d+\b|killed|blocked")


def delivery_exit(detail: str) -> int:
    """The exit code of mail that did not leave, from what the transport said: 1 when
    it was refused for good (the peer, a 5xx, the policy), 3 when the environment failed
    it (the transport unreachable, a temporary failure, the store)."""
    return FAILED if _FOR_GOOD.search(detail) else ENVIRONMENT


# A message that starts with an option (`--amount: …`, `--spend 'x': …`, `--rpc URL …`)
# or an argument (`ADDRESS: …`) names its field.
_FIELD = re.compile(r"^(--[a-z][\w.-]*|[A-Z][A-Z_]+:)")


def field_of(message: str) -> str | None:
    """The option or argument an error message starts with (`--amount: ...`, `ADDRESS: ...`)."""
    m = _FIELD.match(message)
    return m.group(1).rstrip(":") if m else None


@contextmanager
def answers(
    *, transport_prefix: str = "", as_json: bool | None = None,
    input_kinds: tuple[type[EnvelopayError], ...] = (),
) -> Iterator[None]:
    """The errors of the layers below as the CLI's answers, by EXIT_CODES."""
    try:
        yield
    except EnvelopayError as exc:
        fail_with(exc, prefix=transport_prefix, as_json=as_json, input_kinds=input_kinds)


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
    whole: Sequence[str] = (),
) -> None:
    """A rich table on stdout; `overflow` folds long cells instead of cutting them; the
    `whole` columns (ids a person copies into the next command) are never folded or cut."""
    # lazy: keeps rich off this module's import
    from rich.console import Console
    from rich.table import Table

    cells = [tuple(row) for row in rows]
    console = Console(soft_wrap=False, width=width) if width is not None else Console()
    if cells and _natural_width(columns, cells) > console.width:
        # Narrower than the table (an 80-column terminal, a pipe): one block per row, each
        # value whole on its own line, instead of columns folded to a few letters each.
        _cards(columns, cells, title)
        return
    out = Table(title=title)
    for i, col in enumerate(columns):
        if col in whole:
            wide = max((len(row[i]) for row in cells), default=len(col))
            out.add_column(col, no_wrap=True, min_width=max(wide, len(col)))
        elif overflow:
            out.add_column(col, overflow="fold")
        else:
            out.add_column(col)
    for row in cells:
        out.add_row(*row)
    console.print(out)
    if empty is not None and not cells:
        console.print(empty)


def _natural_width(columns: Sequence[str], cells: Sequence[tuple[str, ...]]) -> int:
    """The table's width with no cell folded: each column's widest line, rich's borders
    and padding (three characters a column, and one)."""
    widest = [max([len(col), *(max(map(len, row[i].splitlines() or [""])) for row in cells)])
              for i, col in enumerate(columns)]
    return sum(widest) + 3 * len(columns) + 1


def _cards(columns: Sequence[str], cells: Sequence[tuple[str, ...]], title: str | None) -> None:
    """Each row as a block: its first cell (the id a person copies), then `NAME  value` lines."""
    if title:
        typer.echo(title)
    label = max(len(col) for col in columns[1:]) if len(columns) > 1 else 0
    for n, row in enumerate(cells):
        if n:
            typer.echo("")
        typer.echo(row[0])
        for col, value in zip(columns[1:], row[1:], strict=True):
            if value:
                lines = value.splitlines() or [""]
                typer.echo(f"  {col.ljust(label)}  {lines[0]}")
                for more in lines[1:]:
                    typer.echo(f"  {' ' * label}  {more}")


def next_page(token: str | None, command: str) -> None:
    """Under a page: how to get the next one (nothing after the last page)."""
    if token is not None:
        typer.echo(f"more: {command} --after {shlex.quote(token)}", err=True)


def ran(command: str, code: int = OK, **fields: Any) -> dict[str, Any]:
    """The document of a command that ran: `command`, `ok`, `exit`, then its own fields."""
    return {"command": command, "ok": code == OK, "exit": code, **fields}


def finish(as_json: bool, document: dict[str, Any], lines: Iterable[str] = ()) -> NoReturn:
    """Print the document (--json) or the lines, then exit with the document's `exit`."""
    if as_json:
        emit(document)
    else:
        for line in lines:
            typer.echo(line)
    raise typer.Exit(int(document["exit"]))


_WANTS = {
    "float_parsing": "a number", "float_type": "a number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "int_type": "a whole number", "bool_parsing": "true or false",
}
_BOUNDS = {"greater_than": "more than", "greater_than_equal": "at least", "less_than": "less than",
           "less_than_equal": "at most"}


def plain_words(exc: BaseException) -> str | None:
    """What a command-line value that typer's conversion refused should have been, in
    this project's words (`wants a number, got 'abc'`), not the converter's; None when
    `exc` did not come from a conversion."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if not callable(errors):
        return None
    try:
        first = errors()[0]
    except (IndexError, TypeError):
        return None
    kind, got = first.get("type", ""), first.get("input")
    ctx = first.get("ctx") or {}
    if kind in _WANTS:
        return f"wants {_WANTS[kind]}, got {got!r}"
    if kind in _BOUNDS:
        limit = next(iter(ctx.values()), "?")
        return f"wants {_BOUNDS[kind]} {limit}, got {got!r}"
    return None
