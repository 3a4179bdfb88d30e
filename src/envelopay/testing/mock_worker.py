"""A tiny paid worker for the engine's tests over the mock rail (testing.mock_rail):
task {"op": "echo"} costs PRICE of the mock rail's TOKEN, {"op": "free"} is free; an
OFFER is accepted by paying its want leg on the rail it was given."""

from __future__ import annotations

from envelopay.engine import BaseApplication, Context, Notice, Refuse
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Invoice,
    Methods,
    Offer,
    Order,
    Pay,
    RailMethod,
    Which,
)
from envelopay.testing.mock_rail import CHAIN, PRICE, TOKEN, WORKER_WALLET, DictRail

__all__ = ["WorkerApp"]


class WorkerApp(BaseApplication):
    """A tiny paid worker: task {"op": "echo"} costs PRICE, {"op": "free"} is free."""

    def __init__(self, rail: DictRail | None = None, wallet: str = WORKER_WALLET) -> None:
        self.rail = rail
        self.my_wallet = wallet
        self.fulfilled: list[str] = []
        self.accepted: list[str] = []
        self.notices: list[Notice] = []

    def wallet(self, chain: str, token: str) -> str | None:
        return self.my_wallet if (chain, token) == (CHAIN, TOKEN) else None

    async def methods(self, which: Which, ctx: Context) -> Methods | None:
        return Methods(
            id=ctx.new_id("mth"),
            which_ref=which.id,
            rails=[RailMethod(chain=CHAIN, token=TOKEN, wallet=self.my_wallet, price=PRICE)],
        )

    async def order(
        self, order: Order, ctx: Context, *, paid: int | None
    ) -> Invoice | Fulfill | Refuse | OopsCode | None:
        op = order.task.get("op") if isinstance(order.task, dict) else None
        if op not in ("echo", "free"):
            return OopsCode.UNKNOWN_TASK
        if op == "free" or (paid is not None and paid >= PRICE):
            self.fulfilled.append(order.id)
            return Fulfill(id=ctx.new_id("ful"), order_ref=order.id, result={"echo": order.task})
        if paid is not None:
            return Refuse(OopsCode.AMOUNT_MISMATCH, f"price is {PRICE}")
        return Invoice(
            id=ctx.new_id("inv"),
            order_ref=order.id,
            amount=PRICE,
            token=TOKEN,
            chain=CHAIN,
            wallet=self.my_wallet,
        )

    async def fulfill(self, order: Order, pay: Pay, ctx: Context) -> Fulfill | Refuse | OopsCode:
        self.fulfilled.append(order.id)
        return Fulfill(id=ctx.new_id("ful"), order_ref=order.id, result={"echo": order.task})

    async def offer(self, offer: Offer, ctx: Context) -> Accept | Refuse | OopsCode | None:
        if self.rail is None:
            return OopsCode.UNSUPPORTED_RAIL
        w = offer.want
        proof = await self.rail.pay(chain=w.chain, token=w.token, amount=w.amount, recipient=offer.wallet)
        self.accepted.append(offer.id)
        return Accept(
            id=ctx.new_id("acc"),
            offer_ref=offer.id,
            amount=w.amount,
            token=w.token,
            chain=w.chain,
            proof=proof,
        )

    async def notify(self, notice: Notice) -> None:
        self.notices.append(notice)
