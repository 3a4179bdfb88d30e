"""The agents' payment tools on the MCP front: pay_invoice, pay, make_offer, accept_offer,
prepaid_order, balances and check_payment_status. The agent holds no wallet key: each tool is one call to
the spend enforcer, which decides the payment and its email together and holds the keys.

Every verdict (paid_and_sent, paid_refused, pending_approval, blocked, failed, unknown) is a structured
result with the transaction id and the PAY's Message-ID; only an unreachable enforcer is a
tool error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from envelopay.enforcer.client.payment_client import PaymentClient
from envelopay.errors import TransportError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["register_payment_tools"]

_KEY = (
    " idempotency_key: any stable string naming this payment; a retry with the same key returns"
    " the first outcome and never pays twice."
)

_Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]  # one enforcer call: kind, body


def register_payment_tools(server: MCPServer, enforcer: str, token: str) -> None:
    from mcp.server.mcpserver.exceptions import ToolError  # lazy: keeps mcp off this module's import

    async def call(kind: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with PaymentClient(enforcer, token) as client:
                if kind == "balances":
                    return await client.balances()
                if kind == "status":
                    return (await client.status(str(body["id"]))).to_json()
                return (await client.submit(kind, body)).to_json()
        except TransportError as exc:
            raise ToolError(f"enforcer unreachable: {exc}") from exc

    _payments(server, call)
    _trades(server, call)
    _reading(server, call)


def given(**fields: Any) -> dict[str, Any]:
    """A tool's arguments as the call's body: those the agent gave."""
    return {k: v for k, v in fields.items() if v is not None}


def _payments(server: MCPServer, call: _Call) -> None:
    @server.tool(
        name="pay_invoice",
        description="Pay an INVOICE in your inbox (by its Message-ID, or by its INVOICE id and, when "
        "several senders used that id, `payee`: the sender's address), then send the PAY. The amount "
        "and wallet come from the INVOICE itself; the answer names the payee.",
    )
    async def pay_invoice(invoice: str, payee: str | None = None, note: str | None = None) -> dict[str, Any]:
        return await call("pay_invoice", given(invoice=invoice, payee=payee, note=note))

    @server.tool(
        name="pay",
        description="Pay `amount` (smallest units, digits) of `token` on `chain` to `wallet`, then send "
        "the PAY to `to`." + _KEY,
    )
    async def pay(
        to: str,
        amount: str,
        token: str,
        chain: str,
        wallet: str,
        idempotency_key: str,
        invoice_ref: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        return await call("pay", given(to=to, amount=amount, token=token, chain=chain, wallet=wallet,
                                       idempotency_key=idempotency_key, invoice_ref=invoice_ref, note=note))

    _ = (pay_invoice, pay)


def _trades(server: MCPServer, call: _Call) -> None:
    @server.tool(
        name="make_offer",
        description="Give `amount` of `token` on `chain` to `wallet` (the give leg is paid now) and send "
        "an OFFER to `to` asking for `want` {amount, token, chain} in return." + _KEY,
    )
    async def make_offer(
        to: str,
        amount: str,
        token: str,
        chain: str,
        wallet: str,
        want: dict[str, Any],
        idempotency_key: str,
        note: str | None = None,
    ) -> dict[str, Any]:
        return await call("offer", given(to=to, amount=amount, token=token, chain=chain, wallet=wallet,
                                         want=want, idempotency_key=idempotency_key, note=note))

    @server.tool(
        name="accept_offer",
        description="Accept an OFFER: pay its want leg to the offer's `wallet`, then send the ACCEPT."
        + _KEY,
    )
    async def accept_offer(
        to: str,
        offer_ref: str,
        amount: str,
        token: str,
        chain: str,
        wallet: str,
        idempotency_key: str,
        note: str | None = None,
    ) -> dict[str, Any]:
        return await call("accept", given(to=to, offer_ref=offer_ref, amount=amount, token=token, chain=chain,
                                          wallet=wallet, idempotency_key=idempotency_key, note=note))

    @server.tool(
        name="prepaid_order",
        description="Pay `amount` of `token` on `chain` to the worker's `wallet` (from its METHODS) and "
        "send a v0.2 prepaid ORDER for `task` to `to` carrying the proof: no INVOICE round trip."
        + _KEY,
    )
    async def prepaid_order(
        to: str,
        task: dict[str, Any],
        amount: str,
        token: str,
        chain: str,
        wallet: str,
        idempotency_key: str,
        note: str | None = None,
    ) -> dict[str, Any]:
        return await call("order", given(to=to, task=task, amount=amount, token=token, chain=chain,
                                         wallet=wallet, idempotency_key=idempotency_key, note=note))

    _ = (make_offer, accept_offer, prepaid_order)


def _reading(server: MCPServer, call: _Call) -> None:
    @server.tool(name="balances", description="Your wallets' addresses and balances.")
    async def balances() -> dict[str, Any]:
        return await call("balances", {})

    @server.tool(
        name="check_payment_status",
        description="The state of one of your payments (its id). `paid_refused`: the money moved and "
        "the payee answered the PAY with an OOPS (its `code`). `unknown` with state `broadcast` "
        "(the chain has not confirmed it yet) or `paid` (the money moved, the payee's server has "
        "not taken the PAY yet) is finished by the enforcer by itself; do not pay again.",
    )
    async def check_payment_status(id: str) -> dict[str, Any]:
        return await call("status", {"id": id})

    _ = (balances, check_payment_status)
