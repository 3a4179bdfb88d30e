"""CLI of a worker's refunds (issue 31, SPEC.md "Refunds"): `envelopay refunds list` shows
the refunds not paid — in doubt or failed, whatever they pay back: a failed job
(`job:<id>`), an underpayment or an overpayment's excess (`pay:<chain>:<proof key>`) —
and `envelopay refunds retry KEY` asks a `pay:` one again (a job's goes through
`envelopay jobs refund JOB`, which tells the buyer).

Exit codes (cli/output.py): 0 done (retry: paid); 1 the refund was not paid (pending: in
doubt or being paid by another process; failed: nothing moved — the reason is printed);
2 bad input (no such KEY, one paid already, a job's); 3 the environment (config, ledger,
rail, transport).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from envelopay.cli.options import JsonOpt
from envelopay.cli.output import FAILED, OK, answers, finish, ran, table
from envelopay.rails.amounts import amount_text, no_decimals

__all__ = ["refunds_list", "refunds_retry", "register"]

_Config = Annotated[Path, typer.Option("--config", "-c", help="The worker's configuration (TOML).")]
_Key = Annotated[str, typer.Argument(metavar="KEY",
                                     help="A refund's key, as `envelopay refunds list` shows it.")]
_All = Annotated[bool, typer.Option("--all", help="Every refund, paid ones too, newest first.")]
_Limit = Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many.")]


def refunds_list(config: _Config = Path("envelopay.toml"), everything: _All = False, limit: _Limit = 100,
                 as_json: JsonOpt = False) -> None:
    """The worker's refunds not paid (in doubt or failed), oldest first; --all: every one."""
    # lazy: the node and its ledger load only when the command runs
    from envelopay.client.ledger_reads import config_decimals
    from envelopay.config import load_config
    from envelopay.node.refund_admin import list_refunds

    with answers(as_json=as_json):
        cfg = load_config(config)
        rows = list_refunds(cfg, datetime.now(UTC), everything=everything, limit=limit)
    doc = ran("refunds list", refunds=[r.to_json() for r in rows])
    if not as_json:
        decimals = config_decimals(cfg) if rows else no_decimals
        # What a person reads: `0.25 USDC` (the JSON keeps the smallest units, 250000).
        cells = [(r.order.key, r.status, r.order.reason,
                  amount_text(r.order.amount, r.order.token, decimals(r.order.chain, r.order.token)),
                  r.order.chain, r.order.recipient, (r.error or "")[:40]) for r in rows]
        # The key whole: the operator copies it into `refunds retry KEY`.
        table(("KEY", "STATUS", "REASON", "AMOUNT", "CHAIN", "TO", "ERROR"), cells, overflow=True,
              whole=("KEY", "STATUS", "AMOUNT"), empty="No refunds.")
    finish(as_json, doc)


def refunds_retry(key: _Key, config: _Config = Path("envelopay.toml"), as_json: JsonOpt = False) -> None:
    """Ask a refund that failed or was left in doubt again: paid at most once."""
    # lazy: the node, its rails and the ledger load only when the command runs
    from envelopay.config import load_config
    from envelopay.node.refund_admin import retry_refund

    with answers(as_json=as_json):
        result = asyncio.run(retry_refund(load_config(config), key, datetime.now(UTC)))
    code = OK if result.paid else FAILED
    refund = result.refund.to_json() if result.refund is not None else None
    doc = ran("refunds retry", code, key=key, status=result.status, refund=refund, detail=result.detail)
    finish(as_json, doc, [f"{key}: paid" if result.paid else f"{key}: {result.status}: {result.detail}"])


def register(app: typer.Typer) -> None:
    """Add the `refunds` group to the top-level app."""
    group = typer.Typer(help="A worker's refunds: list those not paid; retry one.", no_args_is_help=True)
    group.command("list")(refunds_list)
    group.command("retry")(refunds_retry)
    app.add_typer(group, name="refunds")
