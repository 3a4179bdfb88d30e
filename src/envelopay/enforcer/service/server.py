"""The enforcer's HTTP/JSON service (loopback or a Unix socket) and its web console.

Agent API (Bearer agent token): POST /v1/send, GET /v1/sends/{id} — answers are always
dispositions (HTTP 200), never errors, whatever the policy decided.
Operator API (Bearer operator token; an agent token gets 401): /v1/agents, /v1/approvals.
Console (/console): the operator's web pages, in enforcer/service/console.py.
Metrics (/metrics): Prometheus text format (enforcer/service/metrics.py).
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.model import Decision, Disposition
from envelopay.enforcer.service.appkeys import ENFORCER
from envelopay.enforcer.service.approval_view import (
    Balances,
    Binding,
    approval_view,
    bind_decision,
    mail_view,
    payment_view,
)
from envelopay.enforcer.service.console import add_console_routes
from envelopay.enforcer.service.http import bearer as _bearer
from envelopay.enforcer.service.http import read_object
from envelopay.enforcer.service.metrics import EnforcerMetrics
from envelopay.enforcer.service.payment_routes import (
    PAYMENTS,
    add_disabled_payment_routes,
    add_payment_routes,
    decide_payment,
)
from envelopay.enforcer.service.request_bodies import decode_send_body
from envelopay.errors import StoreError, UsageError

__all__ = ["build_app", "listen_tcp", "start_server"]

METRICS: web.AppKey[EnforcerMetrics] = web.AppKey("metrics", EnforcerMetrics)


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
    enforcer, now = request.app[ENFORCER], request.app[ENFORCER].clock()
    seen: Balances = {}  # one balance lookup per agent for the page
    held = ([await payment_view(enforcer, payments, i, seen) for i in await payments.store.queue()]
            if payments is not None and first else [])
    return _json({"approvals": [mail_view(r, now=now) for r in rows] + held, "next": nxt})


async def _approval(request: web.Request) -> web.Response:
    view = await approval_view(request.app[ENFORCER], request.app.get(PAYMENTS), request.match_info["id"])
    if view is None:
        return _json({"error": "no such approval"}, status=404)
    return _json(view)


async def _shown_hash(request: web.Request) -> str | web.Response | None:
    """The optional `{"content_hash": …}` a decision carries: the content the operator saw."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        body = None
    shown = body.get("content_hash") if isinstance(body, dict) else None
    if not isinstance(shown, str) or len(shown) > 100:
        return _json({"error": "the body is {\"content_hash\": \"sha256:…\"} or empty"}, status=400)
    return shown


async def _decide(request: web.Request) -> web.Response:
    enforcer = request.app[ENFORCER]
    send_id, action = request.match_info["id"], request.match_info["action"]
    shown = await _shown_hash(request)
    if isinstance(shown, web.Response):
        return shown
    binding = Binding()
    if action in ("approve", "reject"):
        binding = await bind_decision(enforcer, request.app.get(PAYMENTS), send_id, shown)
        if binding.conflict is not None:  # decided on content that is no longer what would leave
            return _decision(binding.conflict)
    paid = await decide_payment(request.app, send_id, action, "operator-api", binding.policy)
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


def build_app(enforcer: Enforcer, payments: Any = None) -> web.Application:
    app = web.Application(middlewares=[_operator_guard], client_max_size=1024 * 1024)
    app[ENFORCER] = enforcer
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
    app.router.add_get("/v1/approvals/{id}", _approval)
    app.router.add_post("/v1/approvals/{id}/{action}", _decide)
    app.router.add_get("/metrics", _metrics)
    add_console_routes(app)
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
