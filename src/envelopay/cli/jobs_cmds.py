"""CLI of a worker's jobs (issue 31, SPEC.md "Refunds"): `envelopay jobs list` shows them;
a paid job held for the operator (task policy `hold`, or a refund that could not be made)
is settled with `envelopay jobs refund JOB` or `envelopay jobs retry JOB`.

Exit codes (cli/output.py): 0 done; 1 the refund was not made (the job stays held or
refunding: the reason is printed); 2 bad input (no such JOB, a job that is not held, an
unpaid job to refund); 3 the environment (config, ledger, rail, transport).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from envelopay.cli.options import JsonOpt
from envelopay.cli.output import FAILED, OK, answers, finish, ran, table
from envelopay.rails.amounts import Decimals, amount_text, no_decimals

__all__ = ["jobs_list", "jobs_refund", "jobs_retry", "register"]

_Config = Annotated[Path, typer.Option("--config", "-c", help="The worker's configuration (TOML).")]
_Job = Annotated[str, typer.Argument(metavar="JOB", help="A job id, as `envelopay jobs list` shows it.")]
_State = Annotated[list[str] | None, typer.Option(
    "--state", help="Only jobs in this state (queued, running, done, failed, held, refunding, refunded); "
    "repeatable.")]
_Limit = Annotated[int, typer.Option("--limit", min=1, max=10_000, help="At most this many, newest first.")]


def jobs_list(config: _Config = Path("envelopay.toml"), state: _State = None, limit: _Limit = 100,
              as_json: JsonOpt = False) -> None:
    """The worker's jobs, newest first: state, task, what was paid, and any refund."""
    # lazy: the node and its ledger load only when the command runs
    from envelopay.client.ledger_reads import config_decimals
    from envelopay.config import load_config
    from envelopay.node.job_admin import job_doc, list_jobs

    with answers(as_json=as_json):
        cfg = load_config(config)
        jobs = list_jobs(cfg, state or (), limit)
    doc = ran("jobs list", jobs=[job_doc(j) for j in jobs])
    if not as_json:
        decimals = config_decimals(cfg) if any(j.token for j in jobs) else no_decimals
        rows = [(j.job_id, j.state, j.task, _paid(j.amount, j.token, j.chain, decimals), j.peer,
                 str((j.refund or {}).get("status") or ""), (j.error or "")[:40]) for j in jobs]
        # The id whole: the operator copies it into `jobs refund JOB` / `jobs retry JOB`.
        table(("JOB", "STATE", "TASK", "PAID", "PEER", "REFUND", "ERROR"), rows, overflow=True,
              whole=("JOB", "STATE", "PAID"))
    finish(as_json, doc)


def _paid(amount: int | str | None, token: str | None, chain: str | None, decimals: Decimals) -> str:
    """What a person reads of a job's or a refund's amount: `0.25 USDC` (the JSON keeps 250000)."""
    if not token or amount is None:
        return "free" if not amount or str(amount) == "0" else str(amount)
    return amount_text(int(amount), token, decimals(chain or "", token))


def jobs_refund(job: _Job, config: _Config = Path("envelopay.toml"), as_json: JsonOpt = False) -> None:
    """Refund a held paid job to the wallet that paid it, once, and tell the buyer (OOPS
    task_failed with the refund)."""
    # lazy: the node, its rails and the ledger load only when the command runs
    from envelopay.client.ledger_reads import config_decimals
    from envelopay.config import load_config
    from envelopay.node.job_admin import job_doc, refund_job

    with answers(as_json=as_json):
        cfg = load_config(config)
        act = asyncio.run(refund_job(cfg, job, datetime.now(UTC)))
    code = OK if act.done else FAILED
    doc = ran("jobs refund", code, **job_doc(act.job), detail=act.detail)
    refund = dict(act.job.refund or {})
    amount = _paid(refund.get("amount"), refund.get("token"), refund.get("chain"),
                   config_decimals(cfg) if act.done else no_decimals)
    line = (f"{job}: refunded {amount} on {refund.get('chain')} to {refund.get('wallet')}" if act.done
            else f"{job}: {act.job.state}, not refunded: {act.detail}")
    finish(as_json, doc, [line])


def jobs_retry(job: _Job, config: _Config = Path("envelopay.toml"), as_json: JsonOpt = False) -> None:
    """Queue a held job again (its attempts start over): the serving worker runs it."""
    # lazy: the ledger loads only when the command runs
    from envelopay.config import load_config
    from envelopay.node.job_admin import job_doc, retry_job

    with answers(as_json=as_json):
        act = retry_job(load_config(config), job, datetime.now(UTC))
    code = OK if act.done else FAILED
    finish(as_json, ran("jobs retry", code, **job_doc(act.job), detail=act.detail),
           [f"{job}: queued again" if act.done else f"{job}: {act.job.state}: {act.detail}"])


def register(app: typer.Typer) -> None:
    """Add the `jobs` group to the top-level app."""
    group = typer.Typer(help="A worker's jobs: list them; refund or retry one held for the operator.",
                        no_args_is_help=True)
    group.command("list")(jobs_list)
    group.command("refund")(jobs_refund)
    group.command("retry")(jobs_retry)
    app.add_typer(group, name="jobs")
