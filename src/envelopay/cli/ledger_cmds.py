"""CLI of the ledger's upkeep: `ledger compact` (retention, SPEC.md "Retention").

It opens the ledger the agent's configuration names and runs beside live workers: each
batch is one short transaction. Bad input → exit 2; an unreachable ledger → exit 1.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer

from envelopay.cli.options import JsonObjectOpt, OlderThanOpt
from envelopay.cli.output import FAILED, answers, emit_or_say

_Config = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    ledger = typer.Typer(help="The ledger's upkeep.", no_args_is_help=True)
    app.add_typer(ledger, name="ledger")

    @ledger.command("compact")
    def compact(
        config: _Config = Path("envelopay.toml"),
        older_than: OlderThanOpt = 30.0,
        batch: Annotated[int, typer.Option("--batch", min=1, help="Rows per transaction.")] = 500,
        vacuum: Annotated[bool, typer.Option("--vacuum", help="PostgreSQL: VACUUM (online) after.")] = False,
        as_json: JsonObjectOpt = False,
    ) -> None:
        """Retention: age out sent outbox rows, settled calls and the log of idle flows;
        keep spent proofs, (sender, id) pairs and Message-ID claims. Online."""
        from envelopay.config import load_config
        from envelopay.ledger._sql import SqlStore
        from envelopay.ledger.retention import compact_ledger
        from envelopay.node.wiring import open_store

        with answers():
            cfg = load_config(config)
        with answers(transport=FAILED):
            store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
            try:
                assert isinstance(store, SqlStore)
                report = compact_ledger(
                    store,
                    older_than=timedelta(days=older_than),
                    now=datetime.now(UTC),
                    batch=batch,
                    vacuum=vacuum,
                )
            finally:
                store.close()
        doc = report.to_json()
        removed = sum(report.removed.values())
        emit_or_say(
            as_json,
            doc,
            f"compacted {report.flows} flows; removed {removed} rows; "
            f"trimmed {sum(report.trimmed.values())} claims (cutoff {doc['cutoff']})",
        )
