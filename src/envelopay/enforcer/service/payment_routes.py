"""The spend enforcer's HTTP routes, added to the enforcer's app (server.build_app).

Agent API (Bearer agent token), answers always payment dispositions (HTTP 200):
  POST /v1/pay  /v1/pay_invoice  /v1/offer  /v1/accept      GET /v1/payments/{id}
  POST /v1/counter (a payment leg whose email the caller sends: the worker's counter-legs)
  GET /v1/balances (the token's own wallets: addresses and balances, nothing else)
Operator API (Bearer operator token; under /v1/agents, guarded by server's middleware):
  GET|PUT /v1/agents/{name}/policy (the spend policy)   GET|POST /v1/agents/{name}/wallets
  GET /v1/agents/{name}/balances
Held payments share /v1/approvals and the console with held sends (server.py).
No route ever returns key material: wallets are shown as id, chain, address and label.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from envelopay.enforcer.send.model import Disposition
from envelopay.enforcer.service.http import bearer as _bearer
from envelopay.enforcer.service.http import read_object
from envelopay.enforcer.spend.model import PaymentDecision, PaymentDisposition
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.payments_exec import approve, reject
from envelopay.enforcer.spend.policy import SpendPolicy
from envelopay.errors import ConfigError, UsageError
from envelopay.rails.key_file import read_key_file

__all__ = ["PAYMENTS", "add_disabled_payment_routes", "add_payment_routes", "decide_payment"]

_KINDS = ("pay", "pay_invoice", "offer", "accept", "counter", "order")
DISABLED = PaymentDisposition(
    status="blocked",
    code="payments_disabled",
    reason="payments_disabled: this enforcer makes no payments; start `enforcer serve` with "
    "--vault-key-file (or $ENVELOPAY_ENFORCER_VAULT_SECRET) and --pay-rail CHAIN[=RPC_URL]",
)

PAYMENTS: web.AppKey[Payments] = web.AppKey("payments", Payments)


async def _body(request: web.Request) -> dict[str, Any] | Disposition:
    return await read_object(request)  # the send path's limits on every request body


def _submit(kind: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        body = await _body(request)
        if isinstance(body, Disposition):
            refusal = PaymentDisposition(status="blocked", code="invalid_request",
                                         reason=f"invalid_request: {body.reason}")
            return web.json_response(refusal.to_json())
        d = await request.app[PAYMENTS].submit(kind, _bearer(request), body)
        return web.json_response(d.to_json())

    return handler


async def _status(request: web.Request) -> web.Response:
    d = await request.app[PAYMENTS].status(_bearer(request), request.match_info["id"])
    return web.json_response(d.to_json())


async def _balances(request: web.Request) -> web.Response:
    return web.json_response(await request.app[PAYMENTS].balances(_bearer(request)))


async def _get_policy(request: web.Request) -> web.Response:
    policy = await request.app[PAYMENTS].get_policy(request.match_info["name"])
    if policy is None:
        return web.json_response({"error": "no such agent"}, status=404)
    return web.json_response({"agent": request.match_info["name"], "policy": policy.to_json()})


async def _put_policy(request: web.Request) -> web.Response:
    body = await _body(request)
    try:
        if isinstance(body, Disposition):
            raise ValueError(body.reason)
        policy = SpendPolicy.from_json(body)
    except ValueError as exc:
        return web.json_response({"error": str(exc)}, status=400)
    if not await request.app[PAYMENTS].set_policy(request.match_info["name"], policy):
        return web.json_response({"error": "no such agent"}, status=404)
    return web.json_response({"agent": request.match_info["name"], "policy": policy.to_json()})


async def _wallets(request: web.Request) -> web.Response:
    wallets = await request.app[PAYMENTS].wallets(request.match_info["name"])
    return web.json_response({"wallets": [w.to_json() for w in wallets]})


async def _agent_balances(request: web.Request) -> web.Response:
    payments = request.app[PAYMENTS]
    agent = await payments.enforcer.store.agent_by_name(request.match_info["name"])
    if agent is None:
        return web.json_response({"error": "no such agent"}, status=404)
    return web.json_response(await payments.balances_of(agent))


async def _add_wallet(request: web.Request) -> web.Response:
    """{"chain", "label"?, "import_file"?}: a new key, or one imported from a file on the
    enforcer's host (the key never travels in a request or a response)."""
    body = await _body(request)
    if isinstance(body, Disposition) or not isinstance(body.get("chain"), str):
        return web.json_response({"error": "a JSON object with chain is required"}, status=400)
    secret: bytes | None = None
    path = body.get("import_file")
    try:
        if path is not None:
            if not isinstance(path, str):
                raise UsageError("import_file must be a path")
            secret = read_key_file(path)
        label = body.get("label", "default")
        if not isinstance(label, str) or not label or len(label) > 64:
            raise UsageError("label: 1-64 characters")
        record = await request.app[PAYMENTS].create_wallet(
            request.match_info["name"], body["chain"], label=label, secret=secret
        )
    except (UsageError, ConfigError) as exc:
        return web.json_response({"error": str(exc)}, status=400)
    return web.json_response({"wallet": record.to_json()}, status=201)


async def decide_payment(
    app: web.Application, intent_id: str, action: str, by: str, policy: str | None = None
) -> PaymentDecision | None:
    """The decision on a held payment, or None when `intent_id` is not a payment. `policy`:
    the spend policy the shown content hash covered (approval_view.bind_decision)."""
    payments = app.get(PAYMENTS)
    if payments is None or await payments.store.get(intent_id) is None:
        return None
    if action == "approve":
        return await approve(payments, intent_id, by, policy)
    if action == "reject":
        return await reject(payments, intent_id, by)
    return PaymentDecision(ok=False, state="MISSING", detail=f"unknown action {action!r}")


def add_payment_routes(app: web.Application, payments: Payments) -> None:
    app[PAYMENTS] = payments
    for kind in _KINDS:
        app.router.add_post(f"/v1/{kind}", _submit(kind))
    app.router.add_get("/v1/payments/{id}", _status)
    app.router.add_get("/v1/balances", _balances)
    app.router.add_get("/v1/agents/{name}/policy", _get_policy)
    app.router.add_put("/v1/agents/{name}/policy", _put_policy)
    app.router.add_get("/v1/agents/{name}/wallets", _wallets)
    app.router.add_post("/v1/agents/{name}/wallets", _add_wallet)
    app.router.add_get("/v1/agents/{name}/balances", _agent_balances)


async def _disabled(request: web.Request) -> web.Response:
    return web.json_response(DISABLED.to_json())


async def _disabled_operator(request: web.Request) -> web.Response:
    return web.json_response({"error": DISABLED.reason, "code": DISABLED.code}, status=409)


def add_disabled_payment_routes(app: web.Application) -> None:
    """An enforcer started without payments answers every payment route with the
    `payments_disabled` disposition (and the options that enable payments), not a 404
    that a client would read as an unreachable enforcer."""
    for kind in _KINDS:
        app.router.add_post(f"/v1/{kind}", _disabled)
    app.router.add_get("/v1/payments/{id}", _disabled)
    app.router.add_get("/v1/balances", _disabled)
    for path in ("policy", "wallets", "balances"):
        app.router.add_route("*", f"/v1/agents/{{name}}/{path}", _disabled_operator)
