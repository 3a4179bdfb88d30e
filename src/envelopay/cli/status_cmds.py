"""`envelopay status FLOW`: ask the worker how the job of one of our orders goes (WHATSUP →
WAIT, SPEC.md "Status while working"), or say what the ledger knows when the worker does
not speak the status extension. Thin: options, one call into envelopay.client.status,
the report printed; exit codes as README "Exit codes"."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

from envelopay.cli.options import LEDGER, ClientOptions
from envelopay.cli.output import answers, emit

_Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait for the answer (positive).")]
_Ask = Annotated[bool, typer.Option("--ask/--no-ask", help="Send WHATSUP (default), or only read the "
                                    "ledger.")]


def _say(line: str) -> None:
    typer.echo(line, err=True)


@LEDGER
def status(o: ClientOptions, flow: str, timeout: _Timeout = 60.0, ask: _Ask = True) -> NoReturn:
    """How the work of order FLOW goes: WHATSUP → WAIT when the worker speaks the status
    extension, else what the ledger knows."""
    from envelopay.client.preflight import check_timeout  # lazy: the command's room loads when it runs
    from envelopay.client.status import status as ask_status  # lazy: as above
    from envelopay.config import load_config  # lazy: as above

    with answers(as_json=o.as_json, transport_prefix="transport: "):
        check_timeout(timeout)
        rep = ask_status(load_config(o.config), flow, ask=ask, timeout=timeout, progress=_say)
    if o.as_json:
        emit(rep.document)
    else:
        for line in rep.lines:
            typer.echo(line)
    raise typer.Exit(rep.code)


def register(app: typer.Typer) -> None:
    """Add `status` to the top-level app."""
    app.command("status")(status)
