"""`envelopay status FLOW`: how the work of one of our orders goes (SPEC.md "Status while
working").

A WHATSUP goes only to a worker that said it speaks the `status` extension (its METHODS
named it, or it sent a WAIT already): a strict worker would answer the unknown keyword
with OOPS `unknown_type`, so it is never asked, and what the ledger knows is shown
instead. The answer is the WAIT naming our WHATSUP, or the FULFILL/OOPS that ends the
flow meanwhile. Exit codes as README "Exit codes": 0 an answer or the ledger's view,
1 no answer within the timeout, 2 no such order flow of ours, 3 the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.client.report import ENVIRONMENT, FAILED, OK, Report
from envelopay.errors import UsageError
from envelopay.ledger.store import FlowRecord, LogEntry, Store
from envelopay.node.agent_node import open_store
from envelopay.protocol.messages import Oops, Wait
from envelopay.protocol.status import STATUS, body_advertises, state_line

if TYPE_CHECKING:
    from envelopay.client.commands import ClientRun
    from envelopay.config import WorkerConfig
    from envelopay.engine import Sent
    from envelopay.node.agent_node import AgentNode

__all__ = ["last_wait", "peer_speaks_status", "status", "status_report"]

# How many of our most recent flows are looked through for the peer's METHODS.
_FLOWS_LOOKED_AT = 500


def _waits(log: Sequence[LogEntry]) -> list[Wait]:
    out = []
    for e in log:
        if e.direction == "in" and e.type == "wait" and e.body is not None:
            try:
                out.append(Wait.model_validate(dict(e.body), strict=False))
            except ValueError:
                continue
    return out


def last_wait(log: Sequence[LogEntry]) -> Wait | None:
    """The latest WAIT the worker sent in this flow (what the ledger knows of the job)."""
    waits = _waits(log)
    return waits[-1] if waits else None


def _ending(log: Sequence[LogEntry], wait: Wait | None) -> dict[str, Any] | None:
    """The job's end as the ledger knows it, when the worker told of a job (a WAIT) and a
    FULFILL or OOPS task_failed came in after its last WAIT (whose state is then out of
    date): done; refunded when the OOPS carries a refund; else failed — the states SPEC
    "Status while working" names. Any other OOPS (one refusing a PAY) ends no job."""
    if wait is None:
        return None
    last_wait_seq = max(e.seq for e in log if e.direction == "in" and e.type == "wait")
    ends = [e for e in log if e.direction == "in" and e.seq > last_wait_seq and (
        e.type == "fulfill" or (e.type == "oops" and _error(e).get("code") == "task_failed"))]
    if not ends:
        return None
    end = ends[-1]
    state = "done" if end.type == "fulfill" else ("refunded" if _error(end).get("refund") else "failed")
    at = dict(wait.at)
    at[state] = end.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"state": state, "at": at, "told": False}


def _error(entry: LogEntry) -> dict[str, Any]:
    error = (entry.body or {}).get("error")
    return dict(error) if isinstance(error, dict) else {}


def peer_speaks_status(store: Store, local: str, flow: FlowRecord, log: Sequence[LogEntry]) -> bool:
    """The worker said it speaks `status`: a WAIT in this flow, or a METHODS of its (in
    this flow or one of our recent flows with it) naming the extension."""
    if _waits(log) or body_advertises(flow.data.get("methods")):
        return True
    for other in store.list_flows(local, limit=_FLOWS_LOOKED_AT):
        if other.peer == flow.peer and body_advertises(other.data.get("methods")):
            return True
    return False


def _order_flow(store: Store, flow_id: str) -> tuple[FlowRecord, list[LogEntry]]:
    flow = store.get_flow(flow_id)
    if flow is None or flow.side != "payer" or not isinstance(flow.data.get("order"), dict):
        raise UsageError(f"FLOW: {flow_id!r} is no order of ours (see envelopay flows)")
    return flow, store.flow_log(flow_id)


def status_report(
    flow: FlowRecord,
    log: Sequence[LogEntry],
    *,
    asked: bool,
    reason: str | None,
    run: ClientRun | None = None,
) -> Report:
    """The `status` document and lines: the worker's answer when it was asked and
    answered, else the latest WAIT the ledger holds (or none)."""
    answer = run.answer if run is not None else None
    reply = answer.message if answer is not None else None
    timed_out = answer is not None and answer.timed_out
    wait = reply if isinstance(reply, Wait) else last_wait(log)
    state = answer.outcome.state if answer is not None and answer.outcome is not None else flow.state
    # A FULFILL or OOPS after the last WAIT ended the job: not "running" any more.
    ended = None if isinstance(reply, Wait) else _ending(log, wait)
    told = None if wait is None else {"state": wait.state, "at": dict(wait.at), "told": wait is reply}
    job = ended or told
    doc: dict[str, Any] = {
        "command": "status", "ok": not timed_out, "exit": FAILED if timed_out else OK,
        "flow": {"id": flow.flow_id, "state": state}, "peer": flow.peer,
        "asked": asked, "reason": reason,
        "job": job,
        "answer": reply.model_dump(mode="json", exclude_none=True) if reply is not None else None,
        "timed_out": timed_out,
    }
    lines = [f"flow {flow.flow_id} with {flow.peer}: {state}"]
    if run is not None:
        lines.append(f"asked WHATSUP {run.sent.message_id}")
    elif reason:
        lines.append(f"not asked: {reason}")
    if reply is not None and not isinstance(reply, Wait):
        # The code and note too: an OOPS that ended the flow meanwhile (say, task_failed with the
        # refund) is not a refusal of the WHATSUP, and a bare "OOPS" reads as one.
        code = reply.error.code if isinstance(reply, Oops) and reply.error is not None else None
        note = reply.note if isinstance(reply, Oops) else ""
        said = "" if not code else f" {note}" if note.startswith(code) else f" {code}: {note}"
        lines.append(f"the worker answered {reply.type.upper()}{said}")
    if ended is not None:
        times = ", ".join(f"{k} {v}" for k, v in ended["at"].items())  # the WAIT's, then the end's
        lines.append(f"ended: {ended['state']} ({times})")
    elif wait is not None:
        lines.append(("the worker says: " if wait is reply else "last told: ") + state_line(wait))
    elif reply is None:
        lines.append("no WAIT from the worker in this flow")
    if timed_out:
        lines.append(f"no answer yet; see: envelopay show {flow.flow_id}")
    if run is not None and run.queued is not None:  # the WHATSUP did not leave
        doc.update(ok=False, exit=ENVIRONMENT)
        lines.append(f"the WHATSUP waits in the outbox ({run.queued}); `envelopay drain` sends it")
    return Report(doc, doc["exit"], tuple(lines))


def _ask(flow_id: str) -> Callable[[AgentNode], Any]:
    async def act(node: AgentNode) -> Sent:
        sent = node.engine.send_whatsup(flow_id)
        await node.drain()
        return sent

    return act


def status(
    cfg: WorkerConfig, flow_id: str, *, ask: bool, timeout: float, progress: Callable[[str], None]
) -> Report:
    """Ask the worker of our order flow `flow_id` (when it speaks `status` and `ask`), or
    say what the ledger knows."""
    # lazy: client.commands builds nodes (cryptography, chains); the ledger-only path needs none
    from envelopay.client.commands import run

    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        flow, log = _order_flow(store, flow_id)
        speaks = peer_speaks_status(store, cfg.agent.address, flow, log)
    finally:
        store.close()
    reason = None
    if STATUS not in cfg.agent.extensions:
        reason = "this agent does not speak the status extension ([agent] extensions)"
    elif not speaks:
        reason = f"{flow.peer} has not said it speaks the status extension (no METHODS or WAIT naming it)"
    elif not ask:
        reason = "--no-ask"
    if reason is not None:
        return status_report(flow, log, asked=False, reason=reason)
    done = run(cfg, _ask(flow_id), wait=True, timeout=timeout, progress=progress)
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        flow, log = _order_flow(store, flow_id)
    finally:
        store.close()
    return status_report(flow, log, asked=True, reason=None, run=done)
