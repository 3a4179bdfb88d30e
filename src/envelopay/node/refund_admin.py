"""The operator's hand on a worker's refunds (`envelopay refunds list|retry`, SPEC.md
"Refunds"): every row of the refunds table, and a retry for money the worker cannot use
(`pay:<chain>:<proof key>`: an underpayment, an overpayment's excess) whose refund failed
or was left in doubt. A failed job's refund (`job:<id>`) is settled through its job
instead (`envelopay jobs refund JOB`), so the buyer is told once, with the job.

A retry is the worker's Refunder asked again with the row's own terms: the refunds table
keys it, so it pays at most once however often it is asked (a row in doubt is asked of
the chain first; a row another live process is paying answers `pending`). A retry that
pays sends the buyer nothing (SPEC.md "Refunds not paid": no message of the protocol says
a refund paid after the answer; the operator passes the proof on).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from envelopay.config import WorkerConfig
from envelopay.errors import ConfigError, UsageError
from envelopay.ledger.refunds import Refund, RefundBook
from envelopay.node.agent_node import build_node, open_store
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refunds import Refunder, RefundResult

__all__ = ["list_refunds", "retry_refund", "retry_refund_row"]


def list_refunds(
    cfg: WorkerConfig, now: datetime, *, everything: bool = False, limit: int = 100
) -> list[Refund]:
    """The worker's refunds not paid (in doubt or failed), oldest first; `everything`: all
    of them, newest first."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        book = RefundBook(store, now=now)
        address = cfg.agent.address
        return book.recent(address, limit) if everything else book.unsettled(address, limit)
    finally:
        store.close()


def _retryable(row: Refund | None, key: str) -> Refund:
    """Bad input (exit 2) before anything is built or paid."""
    if row is None:
        raise UsageError(f"KEY: no refund {key!r} in this worker's ledger")
    if row.status == "paid":
        raise UsageError(f"KEY: {key} is paid already; nothing to retry")
    if key.startswith("job:"):
        raise UsageError(f"KEY: {key} is a job's refund: `envelopay jobs refund {key[4:]}` settles it "
                         "and tells the buyer")
    return row


async def retry_refund_row(book: RefundBook, refunder: Refunder, key: str) -> RefundResult:
    """Ask `refunder` again for the refund `key` on its first terms (amount, wallet)."""
    row = _retryable(book.get(key), key)
    return await refunder.refund(row.order)


async def retry_refund(cfg: WorkerConfig, key: str, now: datetime) -> RefundResult:
    """Retry one unsettled `pay:` refund with the worker's own refunder (its rail keys, or
    the enforcer it pays through)."""
    ledger = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:  # bad input is judged before the node (its transport, its rails) is built
        _retryable(RefundBook(ledger, now=now).get(key), key)
    finally:
        ledger.close()
    node = build_node(cfg)
    try:
        app = node.engine.app
        refunder = app.refunder if isinstance(app, WorkerApplication) else None
        if refunder is None:
            raise ConfigError("this worker cannot pay refunds: no [rails] keypair and no enforcer payments")
        return await retry_refund_row(refunder.book, refunder, key)
    finally:
        await node.close()
        node.engine.store.close()
