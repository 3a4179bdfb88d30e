"""The enforcer's HTTP/JSON service (loopback or a Unix socket) and its web console.

Agent API (Bearer agent token): POST /v1/send, GET /v1/sends/{id} — answers are always
dispositions (HTTP 200), never errors, whatever the policy decided.
Operator API (Bearer operator token; an agent token gets 401): /v1/agents, /v1/approvals.
Console (/console): operator login with the operator token → session cookie; agents and
the approval queue with approve / reject / kill buttons.
Metrics (/metrics): Prometheus text format (enforcer/metrics.py).
"""

from __future__ import annotations

import html
import secrets
import time
from typing import Any
from urllib.parse import quote

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from envelopay.enforcer.core import Enforcer
from envelopay.enforcer.http import bearer as _bearer
from envelopay.enforcer.http import read_object
from envelopay.enforcer.metrics import EnforcerMetrics
from envelopay.enforcer.model import Decision, Disposition
from envelopay.enforcer.payment_routes import (
    PAYMENTS,
    add_disabled_payment_routes,
    add_payment_routes,
    decide_payment,
)
from envelopay.enforcer.requests import decode_send_body
from envelopay.errors import StoreError, UsageError

__all__ = ["build_app", "listen_tcp", "start_server"]

ENFORCER: web.AppKey[Enforcer] = web.AppKey("enforcer", Enforcer)
SESSIONS: web.AppKey[dict[str, str]] = web.AppKey("sessions", dict)
METRICS: web.AppKey[EnforcerMetrics] = web.AppKey("metrics", EnforcerMetrics)
_COOKIE = "epa_session"


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status)


# -- agent API --------------------------------------------------------------------------


async def _send(request: web.Request) -> web.Response:
    started = time.perf_counter()
    body = await read_object(request)  # deep nesting, huge numbers, lone surrogates: refused here
    if isinstance(body, Disposition):
        answer, read = body, None
    else:
        answer, read = await request.app[ENFORCER].send(_bearer(request), body), body
    request.app[METRICS].answered(read, answer, time.perf_counter() - started)
    return _json(answer.to_json())


async def _status(request: web.Request) -> web.Response:
    enforcer = request.app[ENFORCER]
    return _json((await enforcer.status(_bearer(request), request.match_info["id"])).to_json())


# -- operator API -----------------------------------------------------------------------


@web.middleware
async def _operator_guard(request: web.Request, handler: Any) -> web.StreamResponse:
    path = request.path
    if path.startswith(("/v1/agents", "/v1/approvals")) and not request.app[ENFORCER].is_operator(
        _bearer(request)
    ):
        return _json({"error": "operator credential required"}, status=401)
    try:
        response: web.StreamResponse = await handler(request)
    except StoreError as exc:
        return _json({"error": f"store error: {exc}"}, status=503)
    return response


def _decision(decision: Decision) -> web.Response:  # or a PaymentDecision (same fields)
    # A decision that was taken is 200 (even if its delivery then failed); a conflict is 409.
    if decision.ok or decision.disposition is not None:
        status = 200
    elif decision.state == "MISSING":
        status = 404
    else:
        status = 409
    return _json(decision.to_json(), status=status)


PAGE_MAX = 500  # the most rows one page of agents or approvals holds


def _limit(request: web.Request, default: int = 100) -> int:
    raw = request.query.get("limit", str(default))
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 3 or not 1 <= int(raw) <= PAGE_MAX:
        raise UsageError(f"limit must be an integer from 1 to {PAGE_MAX}")
    return int(raw)


async def _agents(request: web.Request) -> web.Response:
    try:
        agents, nxt = await request.app[ENFORCER].agents_page(_limit(request), request.query.get("after"))
    except UsageError as exc:
        return _json({"error": str(exc)}, status=400)
    return _json({"agents": [a.to_json() for a in agents], "next": nxt})


async def _create_agent(request: web.Request) -> web.Response:
    body = decode_send_body(await request.read())  # the same limits as agent requests
    if isinstance(body, Disposition):
        return _json({"error": body.reason, "code": body.code}, status=400)
    allow = body.get("allow", [])
    try:
        if not isinstance(allow, list) or not all(isinstance(a, str) for a in allow):
            raise UsageError("allow must be a list of strings")
        hourly, daily = body.get("hourly", 20), body.get("daily", 100)
        if not isinstance(hourly, int) or not isinstance(daily, int):
            raise UsageError("hourly and daily must be integers")
        agent, token = await request.app[ENFORCER].create_agent(
            str(body.get("name", "")), str(body.get("address", "")), allow=tuple(allow),
            hourly=hourly, daily=daily,
        )
    except UsageError as exc:
        return _json({"error": str(exc)}, status=400)
    return _json({"agent": agent.to_json(), "token": token}, status=201)


async def _kill(request: web.Request) -> web.Response:
    agent = await request.app[ENFORCER].kill_agent(request.match_info["name"])
    if agent is None:
        return _json({"error": "no such agent"}, status=404)
    return _json({"agent": agent.to_json()})


async def _approvals(request: web.Request) -> web.Response:
    try:
        rows, nxt = await request.app[ENFORCER].approvals_page(_limit(request), request.query.get("after"))
    except UsageError as exc:
        return _json({"error": str(exc)}, status=400)

    payments = request.app.get(PAYMENTS)
    # Held payments come with the first page of the queue (they are few: each waits on a person).
    first = request.query.get("after") is None
    held = [i.to_json() for i in await payments.store.queue()] if payments is not None and first else []
    return _json({"approvals": [r.to_json() for r in rows] + held, "next": nxt})


async def _decide(request: web.Request) -> web.Response:
    enforcer = request.app[ENFORCER]
    send_id, action = request.match_info["id"], request.match_info["action"]

    paid = await decide_payment(request.app, send_id, action, "operator-api")
    if paid is not None:  # a held payment: same queue, same answers
        return _decision(paid)  # type: ignore[arg-type]  # same shape: ok, state, disposition
    if action == "approve":
        decision = await enforcer.approve(send_id, "operator-api")
    elif action == "reject":
        decision = await enforcer.reject(send_id, "operator-api")
    elif action == "retry":
        decision = await enforcer.retry(send_id)
    else:
        return _json({"error": f"unknown action {action!r}"}, status=404)
    return _decision(decision)


async def _metrics(request: web.Request) -> web.Response:
    """Prometheus text format. Open like the agent API (loopback or a Unix socket): it
    holds counts, agent names and cap headroom, never a token, address or message."""
    body = await request.app[METRICS].exposition()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


# -- console ----------------------------------------------------------------------------

_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;
margin-bottom:2em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:left}.KILLED{color:#a00}
.PENDING{font-weight:bold}form{display:inline}#msg{padding:.4em;background:#eef}"""


def _page(title: str, body: str) -> web.Response:
    doc = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>"
    )
    return web.Response(text=doc, content_type="text/html", headers={
        "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
        "X-Frame-Options": "DENY",
    })


def _session(request: web.Request) -> str | None:
    """The session's CSRF token when the request carries a valid operator session."""
    sid = request.cookies.get(_COOKIE)
    return request.app[SESSIONS].get(sid) if sid else None


def _button(action: str, target: str, csrf: str, label: str) -> str:
    return (
        f"<form method='post' action='/console/{action}/{html.escape(target)}'>"
        f"<input type='hidden' name='csrf' value='{csrf}'>"
        f"<button id='{action}-{html.escape(target)}' type='submit'>{label}</button></form>"
    )


CONSOLE_PAGE = 50  # rows of each table the console shows at once


def _more(param: str, token: str | None, ident: str, label: str) -> str:
    """A link to the next page of one table (the other table starts over)."""
    if token is None:
        return ""

    return f"<p><a id='{ident}' href='/console?{param}={quote(token)}'>{label}</a></p>"


async def _console(request: web.Request) -> web.Response:
    csrf = _session(request)
    if csrf is None:
        return _page(
            "envelopay enforcer — sign in",
            "<h1>Enforcer console</h1><form method='post' action='/console/login'>"
            "<label>Operator token <input id='token' type='password' name='token' autocomplete='off'>"
            "</label> <button id='login' type='submit'>Sign in</button></form>",
        )
    enforcer = request.app[ENFORCER]
    try:
        agents, agents_next = await enforcer.agents_page(CONSOLE_PAGE, request.query.get("agents_after"))
        rows, queue_next = await enforcer.approvals_page(CONSOLE_PAGE, request.query.get("queue_after"))
    except UsageError as exc:
        return _page(
            "envelopay enforcer", f"<p id='msg'>{html.escape(str(exc))}</p><a href='/console'>Back</a>"
        )
    msg = request.query.get("msg", "")
    parts = ["<h1>Enforcer console</h1>"]
    if msg:
        parts.append(f"<p id='msg'>{html.escape(msg)}</p>")
    parts.append("<h2>Agents</h2>")
    if not agents:
        parts.append("<p id='no-agents'>No agents yet. Agents are created with the CLI: "
                     "<code>envelopay agent create NAME --address ADDR</code>.</p>")
    else:
        parts.append("<table id='agents'><tr><th>Name</th><th>Address</th><th>Status</th><th>Policy</th>"
                     "<th>Actions</th></tr>")
        for a in agents:
            kill = "" if a.killed else _button("kill", a.name, csrf, "Kill")
            parts.append(
                f"<tr id='agent-{html.escape(a.name)}'><td>{html.escape(a.name)}</td>"
                f"<td>{html.escape(a.address)}</td><td class='{a.status}'>{a.status}</td>"
                f"<td>{html.escape(a.policy.summary())}</td><td>{kill}</td></tr>"
            )
        parts.append("</table>")
        parts.append(_more("agents_after", agents_next, "more-agents", "More agents"))
    parts.append("<h2>Approval queue</h2><table id='queue'><tr><th>Send</th><th>Reason</th><th>Status</th>"
                 "<th>Actions</th></tr>")
    for r in rows:  # pending first: the store sorts by status priority
        send = f"{r.agent_name} → {r.request.to}: {r.request.subject or (r.request.msg_type or '').upper()}"
        actions = (
            _button("approve", r.id, csrf, "Approve") + " " + _button("reject", r.id, csrf, "Reject")
            if r.state == "PENDING" else ""
        )
        parts.append(
            f"<tr id='row-{r.id}'><td>{html.escape(send)}</td><td>{html.escape(r.reason)}</td>"
            f"<td class='{r.state}'>{r.state}</td><td>{actions}</td></tr>"
        )
    parts.extend(await _payment_rows(request, csrf))
    parts.append("</table>" + _more("queue_after", queue_next, "more-queue", "More of the queue"))
    parts.append(
        "<form method='post' action='/console/logout'>"
        f"<input type='hidden' name='csrf' value='{csrf}'><button id='logout' type='submit'>Sign out</button>"
        "</form>"
    )
    return _page("envelopay enforcer", "".join(parts))


async def _login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    if not isinstance(token, str) or not request.app[ENFORCER].is_operator(token):
        return _page("sign in failed", "<p id='msg'>Wrong operator token.</p><a href='/console'>Back</a>")
    sid = secrets.token_urlsafe(32)
    request.app[SESSIONS][sid] = secrets.token_urlsafe(16)
    redirect = web.HTTPSeeOther("/console")
    redirect.set_cookie(_COOKIE, sid, httponly=True, samesite="Strict", path="/console")
    raise redirect


async def _csrf_ok(request: web.Request) -> bool:
    csrf = _session(request)
    form = await request.post()
    return csrf is not None and secrets.compare_digest(str(form.get("csrf", "")), csrf)


async def _logout(request: web.Request) -> web.StreamResponse:
    if not await _csrf_ok(request):
        return web.Response(status=403, text="operator session required")
    request.app[SESSIONS].pop(request.cookies.get(_COOKIE, ""), None)
    raise web.HTTPSeeOther("/console")


async def _console_action(request: web.Request) -> web.StreamResponse:
    if not await _csrf_ok(request):
        return web.Response(status=403, text="operator session required")
    enforcer = request.app[ENFORCER]
    action, target = request.match_info["action"], request.match_info["target"]
    if action == "kill":
        agent = await enforcer.kill_agent(target)
        msg = f"killed {target}" if agent else f"no agent {target}"
    elif action in ("approve", "reject") and (
        paid := await _decide_payment(request.app, target, action, "console")
    ) is not None:
        msg = f"{action} {target}: {paid.state}" + (f" ({paid.detail})" if paid.detail else "")
    elif action in ("approve", "reject"):
        decision = await (enforcer.approve(target, "console") if action == "approve"
                          else enforcer.reject(target, "console"))
        msg = f"{action} {target}: {decision.state}" + (f" ({decision.detail})" if decision.detail else "")
    else:
        return web.Response(status=404, text="unknown action")

    raise web.HTTPSeeOther(f"/console?msg={quote(msg)}")


async def _payment_rows(request: web.Request, csrf: str) -> list[str]:
    """Held payments in the approval queue: amount in human and smallest units, asset,
    payee address and wallet, the invoice it pays, and why it is held."""
    payments = request.app.get(PAYMENTS)
    if payments is None:
        return []
    out = []
    for i in await payments.store.queue():
        what = (f"{i.agent_name} pays {i.human_amount()} {i.token} ({i.amount} smallest units) on {i.chain}"
                f" → {i.payee}, wallet {i.wallet}" + (f", invoice {i.invoice_ref}" if i.invoice_ref else ""))
        actions = (
            _button("approve", i.id, csrf, "Approve") + " " + _button("reject", i.id, csrf, "Reject")
            if i.state == "PENDING" else ""
        )
        out.append(f"<tr id='row-{i.id}' class='payment'><td>{html.escape(what)}</td>"
                   f"<td>{html.escape(i.reason)}</td><td class='{i.state}'>{i.state}</td>"
                   f"<td>{actions}</td></tr>")
    return out


async def _decide_payment(app: web.Application, target: str, action: str, by: str) -> Any:
    return await decide_payment(app, target, action, by)


def build_app(enforcer: Enforcer, payments: Any = None) -> web.Application:
    app = web.Application(middlewares=[_operator_guard], client_max_size=1024 * 1024)
    app[ENFORCER] = enforcer
    app[SESSIONS] = {}
    app[METRICS] = EnforcerMetrics(enforcer.store, payments=payments is not None, clock=enforcer.clock)

    if payments is not None:  # the spend enforcer (payments.Payments)
        add_payment_routes(app, payments)
    else:
        add_disabled_payment_routes(app)
    app.router.add_post("/v1/send", _send)
    app.router.add_get("/v1/sends/{id}", _status)
    app.router.add_get("/v1/agents", _agents)
    app.router.add_post("/v1/agents", _create_agent)
    app.router.add_post("/v1/agents/{name}/kill", _kill)
    app.router.add_get("/v1/approvals", _approvals)
    app.router.add_post("/v1/approvals/{id}/{action}", _decide)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/console", _console)
    app.router.add_post("/console/login", _login)
    app.router.add_post("/console/logout", _logout)
    app.router.add_post("/console/{action}/{target}", _console_action)
    return app


async def start_server(
    enforcer: Enforcer, *, host: str = "127.0.0.1", port: int = 0, path: str | None = None,
    payments: Any = None,
) -> tuple[web.AppRunner, str]:
    """Start serving; return the runner (call `cleanup()`) and the URL or socket path."""
    runner = web.AppRunner(build_app(enforcer, payments), access_log=None)
    await runner.setup()
    if path is not None:
        site: web.BaseSite = web.UnixSite(runner, path)
        await site.start()
        return runner, path
    if host not in ("127.0.0.1", "::1", "localhost"):
        await runner.cleanup()
        raise UsageError("the enforcer listens on loopback or a Unix socket only")
    return runner, await listen_tcp(runner, host, port)


async def listen_tcp(runner: web.AppRunner, host: str, port: int) -> str:
    """Serve `runner`'s app on loopback `host:port` too (`enforcer serve --socket S
    --console-port P`: agents on the socket, a browser on the console); its URL."""
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise UsageError("the enforcer listens on loopback or a Unix socket only")
    tcp = web.TCPSite(runner, host, port)
    await tcp.start()
    server = tcp._server
    assert server is not None
    sockets = getattr(server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    return f"http://{host}:{bound}"
