"""The agents' payment tools on the MCP front: pay_invoice, pay, make_offer, accept_offer,
balances and check_payment_status. The agent holds no wallet key: each tool is one call to
the spend enforcer, which decides the payment and its email together and holds the keys.

Every verdict (paid_and_sent, pending_approval, blocked, failed, unknown) is a structured
result with the transaction id and the PAY's Message-ID; only an unreachable enforcer is a
tool error.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from envelopay.enforcer.payment_client import PaymentClient
from envelopay.errors import TransportError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["register_payment_tools"]

_Shape = Callable[..., Awaitable[dict[str, Any]]]

_KEY = (
    " idempotency_key: any stable string naming this payment; a retry with the same key returns"
    " the first outcome and never pays twice."
)


def register_payment_tools(server: MCPServer, enforcer: str, token: str) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

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

    def leg(kind: str, name: str, description: str) -> Callable[[_Shape], object]:
        """A payment tool: `shape` declares its arguments (the MCP schema is read from its
        signature); the tool sends the ones given to the enforcer as one `kind` call."""

        def register(shape: _Shape) -> object:
            @functools.wraps(shape)
            async def tool(**fields: Any) -> dict[str, Any]:
                return await call(kind, {k: v for k, v in fields.items() if v is not None})

            return server.tool(name=name, description=description)(tool)

        return register

    @leg(
        "pay_invoice",
        "pay_invoice",
        "Pay an INVOICE in your inbox (by its Message-ID or INVOICE id), then send the PAY. The amount "
        "and wallet come from the INVOICE itself.",
    )
    async def pay_invoice(invoice: str, note: str | None = None) -> dict[str, Any]:
        raise NotImplementedError  # arguments only: leg() sends them

    @leg(
        "pay",
        "pay",
        "Pay `amount` (smallest units, digits) of `token` on `chain` to `wallet`, then send the PAY to "
        "`to`." + _KEY,
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
        raise NotImplementedError

    @leg(
        "offer",
        "make_offer",
        "Give `amount` of `token` on `chain` to `wallet` (the give leg is paid now) and send an OFFER to "
        "`to` asking for `want` {amount, token, chain} in return." + _KEY,
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
        raise NotImplementedError

    @leg(
        "accept",
        "accept_offer",
        "Accept an OFFER: pay its want leg to the offer's `wallet`, then send the ACCEPT." + _KEY,
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
        raise NotImplementedError

    @server.tool(name="balances", description="Your wallets' addresses and balances.")
    async def balances() -> dict[str, Any]:
        return await call("balances", {})

    @server.tool(name="check_payment_status", description="The state of one of your payments (its id).")
    async def check_payment_status(id: str) -> dict[str, Any]:
        return await call("status", {"id": id})

    _ = (pay_invoice, pay, make_offer, accept_offer, balances, check_payment_status)
