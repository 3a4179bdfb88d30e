"""What the client's reading commands read from this agent's ledger, and the flow a
message joins: one page of flows, one flow's thread, the outbox, the flow a protocol id
belongs to; and the decimals of the config's assets (for amounts as a person reads them).
Each opens the ledger for one read and closes it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.config import WorkerConfig
from envelopay.errors import UsageError
from envelopay.node.agent_node import open_store
from envelopay.rails.amounts import decimals_in
from envelopay.rails.registry import chain_network, make

if TYPE_CHECKING:
    from envelopay.ledger.store import FlowRecord, LogEntry, OutboxRow
    from envelopay.rails.amounts import Decimals
    from envelopay.rails.interface import AssetInfo

__all__ = [
    "chain_decimals", "config_decimals", "flow_of_ref", "flow_thread", "flows", "fulfill_flow", "job_states",
    "oops_flow", "outbox",
]


def flows(cfg: WorkerConfig, limit: int, after: str | None = None) -> tuple[list[FlowRecord], str | None]:
    """One page of this agent's flows, most recently updated first, and the token of the
    next page (None: the last). A token is `updated_at|flow_id` of a page's last flow."""
    before = None
    if after is not None:
        stamp, _, flow_id = after.partition("|")
        try:
            before = (datetime.fromisoformat(stamp), flow_id)
        except ValueError as exc:
            raise UsageError(f"not a flows page token: {after!r}") from exc
        if not flow_id or before[0].tzinfo is None:
            raise UsageError(f"not a flows page token: {after!r}")
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        rows = store.list_flows(cfg.agent.address, limit + 1, before=before)
    finally:
        store.close()
    last = rows[limit - 1] if len(rows) > limit else None
    return rows[:limit], (f"{last.updated_at.isoformat()}|{last.flow_id}" if last else None)


def config_decimals(cfg: WorkerConfig) -> Decimals:
    """The decimals of the assets this agent's rails know (the plugins' registries with the
    config's `assets` overrides), read without reaching a chain: each rail is made on a
    placeholder RPC address it never calls. A rail that cannot be made adds nothing."""
    return _registry_decimals(list(cfg.rails.items()))


def chain_decimals(chains: Iterable[str]) -> Decimals:
    """The decimals the installed rails' own registries give the assets of `chains`
    (`solana-local`, `base-sepolia`…), with no config and no network: for a reader with
    nothing but a folder, as `evidence verify` is. An unknown chain adds nothing."""
    rails: list[tuple[str, Mapping[str, Any]]] = []
    for chain in set(chains):
        try:
            name, network = chain_network(chain)
        except ValueError:
            continue
        rails.append((name, {"network": network}))
    return _registry_decimals(rails)


def _registry_decimals(rails: Iterable[tuple[str, Mapping[str, Any]]]) -> Decimals:
    # lazy: the rail plugins (and their chain libraries) load only when a flow moved money
    from envelopay.errors import EnvelopayError

    assets: list[AssetInfo] = []
    for name, opts in rails:
        options = {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/", "network": opts.get("network"),
                   "assets": opts.get("assets")}
        try:
            rail = make(name, {k: v for k, v in options.items() if v is not None})
        except (EnvelopayError, ImportError, TypeError, ValueError):
            continue
        assets += rail.assets()
        closer = getattr(rail, "aclose", None)
        if closer is not None:
            asyncio.run(closer())
    return decimals_in(assets)


def job_states(cfg: WorkerConfig, flow_ids: Iterable[str]) -> dict[str, str]:
    """The state of each named flow's job, for the flows that have one (a worker's orders):
    `flows` and `show` say it beside the flow's (a held job's flow stays `paid`)."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        jobs = {f: store.job_for_flow(f) for f in flow_ids}
    finally:
        store.close()
    return {f: j.state for f, j in jobs.items() if j is not None}


def flow_thread(cfg: WorkerConfig, flow_id: str) -> tuple[FlowRecord, list[LogEntry]]:
    """One flow and its log; an unknown flow → UsageError."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        rec = store.get_flow(flow_id)
        log = store.flow_log(flow_id) if rec is not None else []
    finally:
        store.close()
    if rec is None:
        raise UsageError(f"FLOW: no flow {flow_id!r} in {cfg.agent.ledger}")
    return rec, log


def outbox(cfg: WorkerConfig) -> list[OutboxRow]:
    """The mail waiting in this agent's outbox (every pending row, due or backing off),
    then the answers held, never sent (SPEC "Automatic answers (RFC 3834)")."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        pending = store.outbox_pending(datetime.now(UTC) + timedelta(days=3650), limit=1000)
        return pending + store.outbox_held(cfg.agent.address, limit=1000)
    finally:
        store.close()


def oops_flow(cfg: WorkerConfig, to: str, flow: str | None, ref: str | None) -> str:
    """The flow an OOPS joins: --flow, else the flow of the message --ref names."""
    if flow is not None:
        return flow
    if ref is None:
        raise UsageError("--flow: an OOPS joins a flow; give --flow FLOW or --ref ID (see `envelopay flows`)")
    return flow_of_ref(cfg, to, ref, "--ref")


def fulfill_flow(cfg: WorkerConfig, to: str, flow: str | None, order_ref: str) -> str:
    """The flow a FULFILL joins: --flow, else the flow of the ORDER --order names."""
    return flow if flow is not None else flow_of_ref(cfg, to, order_ref, "--order")


def flow_of_ref(cfg: WorkerConfig, to: str, ref: str, option: str) -> str:
    """The flow with `to` holding the message whose protocol id is `ref` (UsageError naming `option`)."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        rec = (store.flow_for_ref(cfg.agent.address, to, to, ref)
               or store.flow_for_ref(cfg.agent.address, to, cfg.agent.address, ref))
    finally:
        store.close()
    if rec is None:
        raise UsageError(f"{option}: no message {ref!r} in a flow with {to}; give --flow")
    return rec.flow_id
