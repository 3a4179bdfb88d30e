"""The operator's web console (/console), served by `enforcer serve`.

Login with the operator token → a session cookie (HttpOnly, SameSite=Strict) and a CSRF
token in every form. Pages are Jinja2 templates (templates/, autoescaped): agents with a
kill button; the approval queue showing what would leave (approval_view.py) with
approve / reject buttons that carry the content hash the operator saw; a detail page per
approval; and live.js, which polls /console/live.json every 2 s and swaps the queue rows
in place when they changed.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from envelopay.enforcer.send.model import QueueRow
from envelopay.enforcer.service.appkeys import ENFORCER
from envelopay.enforcer.service.approval_view import (
    Balances,
    approval_view,
    bind_decision,
    mail_view,
    payment_view,
)
from envelopay.enforcer.service.payment_routes import PAYMENTS, decide_payment
from envelopay.enforcer.spend.intent import Intent
from envelopay.errors import UsageError

__all__ = ["CONSOLE_PAGE", "SESSIONS", "add_console_routes"]

SESSIONS: web.AppKey[dict[str, str]] = web.AppKey("sessions", dict)
CONSOLE_PAGE = 50  # rows of each table the console shows at once
_COOKIE = "epa_session"
_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'self'; connect-src 'self'; "
        "form-action 'self'")
_ENV = Environment(
    loader=PackageLoader("envelopay.enforcer.service", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True, lstrip_blocks=True,
)


def _utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))


_ENV.filters["utc"] = _utc


def _html(template: str, **context: Any) -> web.Response:
    text = _ENV.get_template(template).render(**context)
    return web.Response(text=text, content_type="text/html",
                        headers={"Content-Security-Policy": _CSP, "X-Frame-Options": "DENY"})


def _message(msg: str) -> web.Response:
    return _html("message.html", title="envelopay enforcer", msg=msg)


def _session(request: web.Request) -> str | None:
    """The session's CSRF token when the request carries a valid operator session."""
    sid = request.cookies.get(_COOKIE)
    return request.app[SESSIONS].get(sid) if sid else None


async def _page(request: web.Request) -> tuple[list[QueueRow], list[Intent], str | None, str]:
    """The page of held mail (pending first), the held payments (on the first page), the
    next page's token, and the page's version: a digest of each row's id and state, so a
    poll that finds the same version builds nothing (no balance lookups)."""
    after = request.query.get("queue_after")
    rows, nxt = await request.app[ENFORCER].approvals_page(CONSOLE_PAGE, after)
    payments = request.app.get(PAYMENTS)
    intents = await payments.store.queue() if payments is not None and after is None else []
    seen = [(r.id, r.state) for r in rows] + [(i.id, i.state) for i in intents]
    return rows, intents, nxt, hashlib.sha256(repr(seen).encode()).hexdigest()[:16]


async def _views(request: web.Request, rows: list[QueueRow], intents: list[Intent]) -> list[dict[str, Any]]:
    enforcer, payments = request.app[ENFORCER], request.app.get(PAYMENTS)
    balances: Balances = {}  # one balance lookup per agent for the page
    views = [mail_view(r, now=enforcer.clock()) for r in rows]
    return views + [await payment_view(enforcer, payments, i, balances) for i in intents]


def _rows(queue: list[dict[str, Any]], csrf: str) -> str:
    return _ENV.get_template("_queue.html").render(queue=queue, csrf=csrf)


async def _console(request: web.Request) -> web.Response:
    csrf = _session(request)
    if csrf is None:
        return _html("login.html", title="envelopay enforcer — sign in")
    try:
        agents, agents_next = await request.app[ENFORCER].agents_page(
            CONSOLE_PAGE, request.query.get("agents_after"))
        rows, intents, queue_next, version = await _page(request)
    except UsageError as exc:
        return _message(str(exc))
    queue = await _views(request, rows, intents)
    return _html(
        "console.html", title="envelopay enforcer", live=True, csrf=csrf, msg=request.query.get("msg", ""),
        agents=agents, agents_next=agents_next, queue=queue, queue_next=queue_next, version=version,
    )


async def _live(request: web.Request) -> web.Response:
    """The queue rows and their version, for live.js (same session as the page)."""
    csrf = _session(request)
    if csrf is None:
        return web.json_response({"error": "operator session required"}, status=403)
    try:
        rows, intents, _, version = await _page(request)
    except UsageError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    if request.query.get("version") == version:  # nothing changed: nothing built
        return web.json_response({"version": version})
    html = _rows(await _views(request, rows, intents), csrf)
    return web.json_response({"version": version, "html": html})


async def _live_js(request: web.Request) -> web.Response:
    source = (_ENV.loader.get_source(_ENV, "live.js")[0] if _ENV.loader else "")  # packaged beside the pages
    return web.Response(text=source, content_type="text/javascript")


async def _detail(request: web.Request) -> web.Response:
    csrf = _session(request)
    if csrf is None:
        return _html("login.html", title="envelopay enforcer — sign in")
    view = await approval_view(request.app[ENFORCER], request.app.get(PAYMENTS), request.match_info["id"])
    if view is None:
        return _message(f"no approval {request.match_info['id']}")
    return _html("approval.html", title=f"approval {view['id']}", csrf=csrf, v=view)


ACTIVITY_PAGE = 25  # rows of each activity table at once


def _before(raw: str | None) -> tuple[float, str] | None:
    """A page token (`created_at:id` of the previous page's last row); UsageError if bad."""
    if raw is None:
        return None
    stamp, sep, ident = raw.partition(":")
    try:
        at = float(stamp)
    except ValueError:
        at = float("nan")
    if not sep or not ident or at != at:  # NaN: not a number we wrote
        raise UsageError(f"not an activity page token: {raw!r}")
    return at, ident


def _next(query: dict[str, str], key: str, rows: list[Any]) -> str | None:
    """The query string of the next page of one table (the other table starts over)."""
    if len(rows) <= ACTIVITY_PAGE:
        return None
    last = rows[ACTIVITY_PAGE - 1]
    keep = {k: v for k, v in query.items() if k == "agent"}
    return urlencode({**keep, key: f"{last.created_at!r}:{last.id}"})


async def _activity(request: web.Request) -> web.Response:
    """Sends and payments in every state, and the requests refused outright, newest
    first, filterable by agent, each table paged."""
    if _session(request) is None:
        return _html("login.html", title="envelopay enforcer — sign in")
    enforcer, payments = request.app[ENFORCER], request.app.get(PAYMENTS)
    name = request.query.get("agent", "").strip() or None
    context: dict[str, Any] = {"agent": name, "sends": [], "payments": [], "refused": [], "problem": ""}
    try:
        agent = await enforcer.store.agent_by_name(name) if name else None
        if name and agent is None:
            raise UsageError(f"no agent {name!r}")
        agent_id = agent.id if agent is not None else None
        want, query = ACTIVITY_PAGE + 1, request.query
        sends = await enforcer.store.activity(agent_id, want, _before(query.get("sends_before")))
        paid = ([] if payments is None else
                await payments.store.activity(agent_id, want, _before(query.get("payments_before"))))
        refused = await enforcer.store.refusals(agent_id, want, _before(query.get("refused_before")))
    except UsageError as exc:
        context["problem"] = str(exc)
    else:
        context.update(sends=sends[:ACTIVITY_PAGE], payments=paid[:ACTIVITY_PAGE],
                       refused=refused[:ACTIVITY_PAGE],
                       sends_next=_next(dict(query), "sends_before", sends),
                       payments_next=_next(dict(query), "payments_before", paid),
                       refused_next=_next(dict(query), "refused_before", refused))
    return _html("activity.html", title="envelopay enforcer — activity", **context)


async def _login(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = form.get("token")
    if not isinstance(token, str) or not request.app[ENFORCER].is_operator(token):
        return _html("login.html", title="sign in failed", failed=True)
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


async def _decide(request: web.Request, action: str, target: str) -> str:
    """Approve or reject from a console form: the form's content hash must match the
    approval's content now (a console click always carries one)."""
    enforcer, payments = request.app[ENFORCER], request.app.get(PAYMENTS)
    shown = str((await request.post()).get("content_hash", ""))
    binding = await bind_decision(enforcer, payments, target, shown)
    if binding.conflict is not None:
        return f"{action} {target} refused: {binding.conflict.detail}"
    paid = await decide_payment(request.app, target, action, "console", binding.policy)
    if paid is not None:
        return f"{action} {target}: {paid.state}" + (f" ({paid.detail})" if paid.detail else "")
    decision = await (enforcer.approve(target, "console") if action == "approve"
                      else enforcer.reject(target, "console"))
    return f"{action} {target}: {decision.state}" + (f" ({decision.detail})" if decision.detail else "")


async def _action(request: web.Request) -> web.StreamResponse:
    if not await _csrf_ok(request):
        return web.Response(status=403, text="operator session required")
    action, target = request.match_info["action"], request.match_info["target"]
    if action == "kill":
        agent = await request.app[ENFORCER].kill_agent(target)
        msg = f"killed {target}" if agent else f"no agent {target}"
    elif action in ("approve", "reject"):
        msg = await _decide(request, action, target)
    else:
        return web.Response(status=404, text="unknown action")
    raise web.HTTPSeeOther(f"/console?msg={quote(msg)}")


def add_console_routes(app: web.Application) -> None:
    app[SESSIONS] = {}
    app.router.add_get("/console", _console)
    app.router.add_get("/console/live.json", _live)
    app.router.add_get("/console/live.js", _live_js)
    app.router.add_get("/console/approvals/{id}", _detail)
    app.router.add_get("/console/activity", _activity)
    app.router.add_post("/console/login", _login)
    app.router.add_post("/console/logout", _logout)
    app.router.add_post("/console/{action}/{target}", _action)
