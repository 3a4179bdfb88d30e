"""The worker's console (`worker serve --console [HOST:]PORT`): read-only pages of what the
worker did, from its ledger's summaries (envelopay.ledger.summaries; no SQL here).

/console shows flows by state (counts, and a list a page at a time, filtered by peer, kind
and state), revenue per day per rail, jobs and refunds (when the ledger has them), and the
OOPS sent, by code and the latest; /console/flows/ID shows one flow's messages. The page
polls /console/live.json every 2 s (live.js) and puts the sections in place when their
version changed, so new flows and state changes appear without a reload. A poll first asks
the ledger's change mark (two index steps); the sections are read again only when it moved,
or when what was read is older than REREAD seconds (a job's move that wrote no mail).

It has no login and changes nothing; it listens on loopback unless told a host, so only
this machine's users read it (README "Worker console").
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from envelopay.errors import UsageError
from envelopay.ledger.jobs import Job
from envelopay.ledger.summaries import FlowFilter, Summaries
from envelopay.node.console_view import (
    flow_row,
    job_row,
    message_row,
    money,
    oops_row,
    revenue_rows,
    utc,
)
from envelopay.node.listen import http_endpoint, serve_app
from envelopay.rails.amounts import Decimals

__all__ = ["FLOWS_PAGE", "Console", "console_endpoint", "start_console"]

FLOWS_PAGE = 25  # flows listed at once
RECENT = 20  # rows of the OOPS, jobs and refunds lists
WINDOW_DAYS = 30  # revenue and OOPS counts cover this many days back
REREAD = 30.0  # seconds a read of the sections serves polls while the change mark stands
_CACHED = 32  # filters (and pages) whose last read is kept
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; connect-src 'self'; "
        "form-action 'self'")
_ENV = Environment(
    loader=PackageLoader("envelopay.node", "console_templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True, lstrip_blocks=True,
)
_FILTERS = ("peer", "kind", "state")
_SHORT_ID = 24  # characters: an id this short stays whole (a task name, buyer@garden.local)


def _idcls(value: object) -> str:
    """The class of a cell holding an id: "id" (wraps anywhere, base.html) when it is long
    enough to need it. Every cell wrapping anywhere let the table break short ones too
    ("word_coun|t") whenever a row was wider than the window."""
    return "id" if len(str(value)) > _SHORT_ID else ""


_ENV.filters["idcls"] = _idcls


@dataclass(slots=True)
class Console:
    """What the pages read: the ledger's summaries for one address, the assets' decimals
    and the clock; and the last read per filter, with the change mark it was read at."""

    reads: Summaries
    address: str
    decimals: Decimals
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    read_at: dict[Any, tuple[tuple[str, ...], datetime, dict[str, Any]]] = field(default_factory=dict)


_CONSOLE: web.AppKey[Console] = web.AppKey("console", Console)


def _filter(query: Any) -> FlowFilter:
    """The list's filter from the query; UsageError names a value no flow could have."""
    values: dict[str, str | None] = {}
    for name in _FILTERS:
        value = str(query.get(name, "")).strip()
        if len(value) > 200 or not value.isprintable():
            raise UsageError(f"{name}: not a {name} a flow has")
        values[name] = value or None
    return FlowFilter(**values)


def _before(query: Any) -> tuple[datetime, str] | None:
    """The page token (the previous page's last flow: `before` = its updated_at, `after_id` its id)."""
    at, ident = query.get("before"), query.get("before_id")
    if at is None and ident is None:
        return None
    try:
        when = datetime.fromisoformat(str(at))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None or not ident:
        raise UsageError(f"not a page token: before={at!r}")
    return when, str(ident)


def _job_states(reads: Summaries, flow_ids: list[str]) -> dict[str, str]:
    """The state of each listed flow's job (a page: at most FLOWS_PAGE reads by key), as
    `envelopay flows` reads them; the ledger's Store has them, bare summaries do not."""
    lookup: Callable[[str], Job | None] | None = getattr(reads, "job_for_flow", None)
    if lookup is None:
        return {}
    found = {f: lookup(f) for f in flow_ids}
    return {f: j.state for f, j in found.items() if j is not None}


def _sections(console: Console, where: FlowFilter, before: tuple[datetime, str] | None) -> dict[str, Any]:
    """Everything the live part of the page shows (blocking: the ledger is synchronous)."""
    reads, local, decimals = console.reads, console.address, console.decimals
    since = console.clock() - timedelta(days=WINDOW_DAYS)
    flows = reads.find_flows(local, where, FLOWS_PAGE + 1, before)
    more = len(flows) > FLOWS_PAGE
    flows = flows[:FLOWS_PAGE]
    nxt = None
    if more:
        keep = {k: v for k, v in (("peer", where.peer), ("kind", where.kind), ("state", where.state)) if v}
        nxt = urlencode({**keep, "before": flows[-1].updated_at.isoformat(), "before_id": flows[-1].flow_id})
    counts = reads.flow_counts(local)
    jobs, refunds = reads.job_counts(local), reads.refund_counts(local)
    held = _job_states(reads, [f.flow_id for f in flows]) if jobs is not None else {}
    return {
        "counts": [{"kind": c.kind, "state": c.state, "count": c.count} for c in counts],
        "total": sum(c.count for c in counts),
        "flows": [flow_row(f, held.get(f.flow_id)) for f in flows], "flows_next": nxt,
        "revenue": revenue_rows(reads.paid_entries(local, since), decimals,
                                reads.refunds_paid_since(local, since) if refunds is not None else ()),
        "job_counts": jobs,
        "jobs": [job_row(j, decimals) for j in reads.recent_jobs(local, RECENT)] if jobs is not None else [],
        "refund_counts": refunds,
        "refunds": [
            {"key": r.key, "flow": r.flow_id, "peer": r.peer, "reason": r.reason, "status": r.status,
             "tx": r.tx_id or "", "updated": utc(r.updated_at), **money(r.amount, r.chain, r.token, decimals)}
            for r in reads.recent_refunds(local, RECENT)
        ] if refunds is not None else [],
        "oops_counts": reads.oops_counts(local, since),
        "oops": [oops_row(o) for o in reads.oops_recent(local, RECENT)],
        "window": WINDOW_DAYS,
    }


def _version(sections: dict[str, Any]) -> str:
    return hashlib.sha256(repr(sorted(sections.items())).encode()).hexdigest()[:16]


def _html(template: str, **context: Any) -> web.Response:
    text = _ENV.get_template(template).render(**context)
    return web.Response(text=text, content_type="text/html",
                        headers={"Content-Security-Policy": _CSP, "X-Frame-Options": "DENY"})


def _cached(console: Console, where: FlowFilter, before: tuple[datetime, str] | None) -> dict[str, Any]:
    """The sections, read again only when the ledger's change mark moved or the last read
    is older than REREAD seconds."""
    key, now = (where, before), console.clock()
    mark = console.reads.change_mark(console.address)
    held = console.read_at.get(key)
    if held is not None and held[0] == mark and (now - held[1]).total_seconds() < REREAD:
        return held[2]
    sections = _sections(console, where, before)
    if len(console.read_at) >= _CACHED:
        console.read_at.clear()
    console.read_at[key] = (mark, now, sections)
    return sections


async def _read(request: web.Request) -> tuple[dict[str, Any], FlowFilter]:
    console = request.app[_CONSOLE]
    where, before = _filter(request.query), _before(request.query)
    return await asyncio.to_thread(_cached, console, where, before), where


async def _page(request: web.Request) -> web.Response:
    console = request.app[_CONSOLE]
    try:
        sections, where = await _read(request)
    except UsageError as exc:
        return _html("message.html", title="envelopay worker", msg=str(exc), address=console.address)
    return _html("console.html", title=f"envelopay worker — {console.address}", address=console.address,
                 live=True, where=where, version=_version(sections), **sections)


async def _live(request: web.Request) -> web.Response:
    """The live sections and their version, for live.js; nothing built when unchanged."""
    try:
        sections, _ = await _read(request)
    except UsageError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    version = _version(sections)
    if request.query.get("version") == version:
        return web.json_response({"version": version})
    html = _ENV.get_template("_live.html").render(**sections)
    return web.json_response({"version": version, "html": html})


async def _flow(request: web.Request) -> web.Response:
    console = request.app[_CONSOLE]
    ident = request.match_info["id"]
    flow = await asyncio.to_thread(console.reads.get_flow, ident)
    if flow is None or flow.local.lower() != console.address.lower():
        return _html("message.html", title="envelopay worker", msg=f"no flow {ident}",
                     address=console.address)
    log = await asyncio.to_thread(console.reads.flow_log, ident)
    job = (await asyncio.to_thread(_job_states, console.reads, [ident])).get(ident)
    return _html("flow.html", title=f"flow {ident}", address=console.address, flow=flow_row(flow, job),
                 messages=[message_row(e, console.decimals) for e in log])


async def _live_js(_: web.Request) -> web.Response:
    source = _ENV.loader.get_source(_ENV, "live.js")[0] if _ENV.loader else ""  # packaged beside the pages
    return web.Response(text=source, content_type="text/javascript")


async def _home(_: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/console")


def console_app(console: Console) -> web.Application:
    app = web.Application()
    app[_CONSOLE] = console
    app.router.add_get("/", _home)
    app.router.add_get("/console", _page)
    app.router.add_get("/console/live.json", _live)
    app.router.add_get("/console/live.js", _live_js)
    app.router.add_get("/console/flows/{id}", _flow)
    return app


def console_endpoint(text: str) -> tuple[str, int]:
    """`--console` as typed: PORT (loopback) or HOST:PORT ([::1]:PORT for IPv6); port 0
    lets the system choose. UsageError names what is wrong."""
    return http_endpoint("--console", text)


async def start_console(console: Console, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve the console; return the runner (call `cleanup()`) and the page's URL."""
    return await serve_app(console_app(console), host, port, "/console")
