"""The rails mock kit: a rail whose verdicts a test controls exactly, and the messages
a test sends through an engine that uses it.

`DictRail` is a MOCK RAIL, as httpx's `MockTransport` is a mock transport: a
deterministic proof source over a dict of "transactions" (`Tx`). The real chains
(LiteSVM, eth-tester) are the rails' own business, checked by `check_rail`; an engine's
tests need a proof source whose verdicts they choose. Its wallets sign bindings
(envelopay.rails.binding) with HMAC-SHA256 under a key derived from the wallet name and
a fixed test secret: only code that asks `wallet_sig` for a wallet can sign as it, which
is what a test's attacker never does. It holds no key and moves no money.

The rest builds what such a test sends: `raw` (a message's RFC 5322 bytes, composed by
the protocol layer), `order`, `pay`, `bind` (a proof bound to its sender), a `Clock`
that ticks a millisecond per reading, and `counter_ids`. `mock_worker.WorkerApp` is the
paid worker those tests talk to.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.protocol.compose import compose
from envelopay.protocol.messages import (
    Message,
    Offer,
    Order,
    Pay,
)
from envelopay.protocol.outbound import Outbound
from envelopay.rails.binding import PAYER_FIELD, SIG_FIELD, statement
from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict

__all__ = [
    "BUYER",
    "BUYER_WALLET",
    "CHAIN",
    "PRICE",
    "T0",
    "TOKEN",
    "WORKER",
    "WORKER_WALLET",
    "Clock",
    "DictRail",
    "Tx",
    "bind",
    "counter_ids",
    "order",
    "pay",
    "raw",
    "wallet_sig",
]

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
    """One transaction the mock chain holds, and what verify makes of it."""

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


class Clock:
    """Now, a millisecond later at each reading (from T0 unless told)."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now


def counter_ids(prefix: str = "") -> Callable[[], str]:
    """Ids PREFIX000001, PREFIX000002, …"""
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
    """An ORDER of the mock worker's task `op` (echo: paid; free: free)."""
    return Order(id=oid, task={"op": op})


def bind(
    message: Message, *, wallet: str = "W-someone", sender: str = BUYER, to: str = WORKER
) -> Message:
    """`message` with its proof bound to `sender` by `wallet`'s signature."""
    if message.id is None:
        raise ValueError("bind: the message needs its protocol id (the statement names it)")
    leg: Any = message.give if isinstance(message, Offer) else message
    key = str(leg.proof["tx"]).strip().lower()
    said = statement(payee=to, payer=sender, message_id=message.id, chain=leg.chain, tx=key)
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
    """A PAY of `amount` on the mock rail, its proof the transaction `tx`."""
    return Pay(id=pid, amount=amount, token=token, chain=chain, proof={"tx": tx}, invoice_ref=invoice_ref)
