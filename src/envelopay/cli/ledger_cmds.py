"""CLI of the ledger's upkeep: `ledger compact` (retention, SPEC.md "Retention").

It opens the ledger the agent's configuration names and runs beside live workers: each
batch is one short transaction. Exit codes by cli/output.EXIT_CODES (an unreachable
ledger is the environment: 3).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from envelopay.cli.maintained import LEDGER_TABLE, missing_store
from envelopay.cli.options import MAX_BATCH, RETENTION, Retention
from envelopay.cli.output import ENVIRONMENT, answers, fail, finish, ran

_Config = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]


ledger_app = typer.Typer(help="The ledger's upkeep.", no_args_is_help=True)


@ledger_app.command("compact")
@RETENTION
def compact(
    keep: Retention,
    config: _Config = Path("envelopay.toml"),
    batch: Annotated[int, typer.Option("--batch", min=1, max=MAX_BATCH,
                                       help="Rows per transaction (1-100,000).")] = 500,
    vacuum: Annotated[bool, typer.Option("--vacuum", help="PostgreSQL: VACUUM (online) after.")] = False,
) -> None:
    """Retention: age out sent outbox rows, settled calls and the log of idle flows;
    keep spent proofs, (sender, id) pairs and Message-ID claims. Online."""
    # lazy: keeps cryptography off this module's import; the command's room loads when it runs
    from envelopay.config import load_config
    from envelopay.ledger._sql import SqlStore
    from envelopay.ledger.retention import compact_ledger
    from envelopay.node.agent_node import open_store

    with answers(as_json=keep.as_json):
        cfg = load_config(config)
        gone = missing_store(cfg.agent.ledger, LEDGER_TABLE, Path(cfg.base_dir))
    if gone is not None:  # the config names it: the environment (3), and never made here
        fail(f"ledger: {gone}; nothing was created (the worker makes its ledger)", ENVIRONMENT,
             as_json=keep.as_json, error="config", field="ledger")
    with answers(as_json=keep.as_json):
        store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
        try:
            assert isinstance(store, SqlStore)
            report = compact_ledger(
                store,
                older_than=timedelta(days=keep.older_than),
                now=datetime.now(UTC),
                batch=batch,
                vacuum=vacuum,
            )
        finally:
            store.close()
    doc = report.to_json()
    removed = sum(report.removed.values())
    finish(keep.as_json, ran("ledger compact") | doc,
           [f"compacted {report.flows} flows; removed {removed} rows; "
            f"trimmed {sum(report.trimmed.values())} kept rows (claims, pairs, proofs) "
            f"(cutoff {doc['cutoff']})"])


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.add_typer(ledger_app, name="ledger")
