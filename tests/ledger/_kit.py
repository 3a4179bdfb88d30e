"""Test helpers for the ledger and engine tests (imported by path, also by the worker
subprocesses of the reliability tests).

`DictRail` is a TEST RAIL: a deterministic proof source over a dict of "transactions".
The real chains (LiteSVM, eth-tester) are the rails' own business and tested there;
here we need a proof source whose verdicts we control exactly. Its wallets sign
bindings (envelopay.rails.binding) with HMAC-SHA256 under a key derived from the wallet
name and a fixed test secret: only code that asks `wallet_sig` for a wallet can sign
as it, which is what a test's attacker never does.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.engine import BaseApplication, Context, Notice, Refuse
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Invoice,
    Message,
    Methods,
    Offer,
    Order,
    Pay,
    RailMethod,
    Which,
)
from envelopay.protocol.outbound import Outbound
from envelopay.rails.binding import PAYER_FIELD, SIG_FIELD, statement
from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict

_TEST_WALLET_SECRET = b"envelopay test wallets (not a key)"


def wallet_sig(wallet: str, message: bytes) -> str:
    """The test wallet `wallet`'s signature of `message`."""
    key = hmac.new(_TEST_WALLET_SECRET, wallet.encode(), hashlib.sha256).digest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()

CHAIN = "testchain"
TOKEN = "TOK"
PRICE = 100
WORKER = "worker@garden.test"
BUYER = "buyer@client.test"
WORKER_WALLET = "W-worker"
BUYER_WALLET = "W-buyer"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@dataclass
class Tx:
    to: str
    token: str
    amount: int
    status: str = "ok"  # ok | failed | pending | unavailable
    payer: str = "W-someone"
    time: datetime = T0  # the block time the chain reports


class DictRail:
    """A TEST RAIL over a dict of transactions (see module docstring)."""

    name = "dictrail"

    def __init__(self, txs: dict[str, Tx] | None = None, wallet: str = WORKER_WALLET) -> None:
        self.txs: dict[str, Tx] = txs if txs is not None else {}
        self.wallet = wallet
        self.verify_calls = 0
        self._n = itertools.count(1)

    @property
    def chains(self) -> tuple[str, ...]:
        return (CHAIN,)

    def assets(self) -> tuple[AssetInfo, ...]:
        return (AssetInfo(CHAIN, TOKEN, None, 0),)

    def proof_key(self, proof: dict[str, Any]) -> str:
        tx = proof.get("tx")
        if not isinstance(tx, str) or not tx.strip():
            raise ValueError("proof needs a 'tx' string")
        return tx.strip().lower()  # one spelling per transaction

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        return self.wallet, wallet_sig(self.wallet, message)

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        return hmac.compare_digest(wallet_sig(payer, message), signature)

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        self.verify_calls += 1
        key = self.proof_key(proof)
        tx = self.txs.get(key)
        if tx is None:
            return Verdict.rejected(Reason.TX_NOT_FOUND, key)
        if tx.status == "pending":
            return Verdict.pending("not final yet")
        if tx.status == "unavailable":
            return Verdict.unavailable("rpc down")
        if tx.status == "failed":
            return Verdict.rejected(Reason.TX_FAILED)
        if expectation.chain != CHAIN:
            return Verdict.rejected(Reason.CHAIN_MISMATCH)
        if tx.token != expectation.token:
            return Verdict.rejected(Reason.TOKEN_MISMATCH)
        if tx.to != expectation.recipient:
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH)
        if expectation.payer is not None and tx.payer != expectation.payer:
            return Verdict.rejected(Reason.PAYER_MISMATCH, f"paid by {tx.payer}")
        if tx.amount != expectation.amount:
            return Verdict.rejected(Reason.AMOUNT_MISMATCH)
        if expectation.not_before is not None and tx.time < expectation.not_before:
            return Verdict.rejected(Reason.STALE, f"block time {tx.time.isoformat()}")
        return Verdict.accepted(observed_amount=tx.amount, payer=tx.payer, tx_time=tx.time, proof_key=key)

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        tx = f"paid-{self.wallet}-{next(self._n)}"
        self.txs[tx.lower()] = Tx(recipient, token, amount, payer=self.wallet)
        return {"tx": tx}


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


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def counter_ids(prefix: str = "") -> Callable[[], str]:
    n = itertools.count(1)
    return lambda: f"{prefix}{next(n):06d}"


_mid = itertools.count(1)


def raw(
    message: Message,
    *,
    sender: str = BUYER,
    to: str = WORKER,
    message_id: str | None = None,
    in_reply_to: str | None = None,
    references: tuple[str, ...] = (),
    date: datetime = T0,
) -> bytes:
    """RFC 5322 bytes for `message`, composed by the protocol layer."""
    mid = message_id or f"<m{next(_mid)}.{id(message)}@client.test>"
    return compose(
        Outbound(
            sender=sender,
            recipient=to,
            message=message,
            message_id=mid,
            date=date,
            in_reply_to=in_reply_to,
            references=references,
        )
    )


def order(oid: str = "ord_1", op: str = "echo") -> Order:
    return Order(id=oid, task={"op": op})


def bind(
    message: Message, *, wallet: str = "W-someone", sender: str = BUYER, to: str = WORKER
) -> Message:
    """`message` with its proof bound to `sender` by `wallet`'s signature."""
    leg: Any = message.give if isinstance(message, Offer) else message
    key = str(leg.proof["tx"]).strip().lower()
    said = statement(payee=to, payer=sender, message_id=message.id, chain=leg.chain, tx=key)  # type: ignore[union-attr]
    proof = {**leg.proof, PAYER_FIELD: wallet, SIG_FIELD: wallet_sig(wallet, said)}
    if isinstance(message, Offer):
        return message.model_copy(update={"give": message.give.model_copy(update={"proof": proof})})
    return message.model_copy(update={"proof": proof})


def pay(
    pid: str,
    tx: str,
    *,
    amount: int = PRICE,
    invoice_ref: str | None = None,
    token: str = TOKEN,
    chain: str = CHAIN,
) -> Pay:
    return Pay(id=pid, amount=amount, token=token, chain=chain, proof={"tx": tx}, invoice_ref=invoice_ref)
