"""A Solana JSON-RPC node over a `LocalSolana` chain (tests, demo, benchmarks).

Serves the methods the rail's RPC backend uses, with the answer shapes of a real
node, so the RPC backend (verification and payment) runs end to end against real
signed transactions on LiteSVM::

    async with JsonRpcServer(solana_rpc_handler(chain)) as node:
        rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local", ...})

With a `SlotClock` (`solana_rpc_handler(chain, clock)`, run `clock.run()` on the serving
loop) slots advance on a clock, 400 ms by default as on mainnet, and a transaction is
`processed` in the slot it lands in, `confirmed` `confirmed_after` slots later and
`finalized` `finalized_after` slots later (mainnet: about 1-2 and 32 slots). Without
one, every transaction is finalized at once (the demo's instant chain).

Dev-only methods for `envelopay fund`: `requestAirdrop` (as solana-test-validator) and
`envelopay_mintTokens(wallet, symbol, amount)`, which the faucet mints.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from solders.pubkey import Pubkey
from solders.transaction import Transaction
from solders.transaction_metadata import FailedTransactionMetadata

from envelopay.devnet.rpc_server import JsonRpcFault
from envelopay_solana.local import LocalSolana, _ui_amount
from envelopay_solana.verify import COMMITMENT_RANK

INVALID_PARAMS = -32602
PREFLIGHT_FAILURE = -32002
SLOT_TIME = 0.4  # seconds, mainnet's target
CONFIRMED_AFTER = 2  # slots until a supermajority has voted (mainnet: ~1-2)
FINALIZED_AFTER = 32  # slots until rooted (mainnet: 31+ confirmed blocks on top)


@dataclass
class SlotClock:
    """Slots on a clock, and commitment that lags the slot a transaction landed in."""

    chain: LocalSolana
    slot_time: float = SLOT_TIME
    confirmed_after: int = CONFIRMED_AFTER
    finalized_after: int = FINALIZED_AFTER
    _young: dict[str, int] = field(default_factory=dict)  # signature → slot, not yet finalized

    def __post_init__(self) -> None:
        if self.slot_time <= 0 or not 0 <= self.confirmed_after <= self.finalized_after:
            raise ValueError("slot_time > 0 and 0 <= confirmed_after <= finalized_after")
        self.chain.slot_clocked = True

    def send(self, tx: Transaction) -> str:
        result = self.chain.send(tx, commitment="processed")
        if self.chain.lookup(result.signature)[0] is not None:
            self._young[result.signature] = self.chain.slot()
            self._settle(self.chain.slot())
        return result.signature

    def tick(self) -> None:
        self._settle(self.chain.advance_slot())

    def _settle(self, slot: int) -> None:
        for signature, landed in list(self._young.items()):
            age = slot - landed
            if age >= self.finalized_after:
                self.chain.set_commitment(signature, "finalized")
                del self._young[signature]
            elif age >= self.confirmed_after:
                self.chain.set_commitment(signature, "confirmed")

    def confirmations(self, signature: str) -> int | None:
        landed = self._young.get(signature)
        return None if landed is None else self.chain.slot() - landed

    async def run(self) -> None:
        """Advance a slot every `slot_time` seconds until cancelled (one slot after a stall)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.slot_time
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            self.tick()
            next_at = max(next_at + self.slot_time, loop.time())


def solana_rpc_handler(chain: LocalSolana, clock: SlotClock | None = None) -> Callable[[str, list[Any]], Any]:
    """A JSON-RPC handler answering from `chain` (see JsonRpcServer), timed by `clock` if given."""
    return _SolanaRpc(chain, clock).handle


class _SolanaRpc:
    """The JSON-RPC methods the devnet's Solana node answers, one method each."""

    def __init__(self, chain: LocalSolana, clock: SlotClock | None) -> None:
        self.chain = chain
        self.clock = clock

    def context(self) -> dict[str, Any]:
        return {"slot": self.chain.svm.get_clock().slot, "apiVersion": "2.1.0"}

    def config(self, params: list[Any], index: int) -> dict[str, Any]:
        value = params[index] if len(params) > index else {}
        return value if isinstance(value, dict) else {}

    def pubkey(self, value: Any) -> Pubkey:
        try:
            return Pubkey.from_string(str(value))
        except ValueError as exc:
            raise JsonRpcFault(INVALID_PARAMS, f"Invalid param: {exc}") from exc

    def get_transaction(self, params: list[Any]) -> Any:
        doc, reached = self.chain.lookup(str(params[0]))
        wanted = self.config(params, 1).get("commitment", "finalized")
        if doc is None or reached is None or COMMITMENT_RANK[reached] < COMMITMENT_RANK.get(wanted, 2):
            return None
        return doc

    def get_signature_statuses(self, params: list[Any]) -> Any:
        out: list[dict[str, Any] | None] = []
        for sig in params[0]:
            doc, reached = self.chain.lookup(str(sig))
            if doc is None:
                out.append(None)
                continue
            depth = None if self.clock is None else self.clock.confirmations(str(sig))
            out.append({"slot": doc["slot"],
                        "confirmations": None if reached == "finalized" else (depth or 0),
                        "err": doc["meta"]["err"], "status": doc["meta"]["status"],
                        "confirmationStatus": reached})
        return {"context": self.context(), "value": out}

    def get_balance(self, params: list[Any]) -> Any:
        return {"context": self.context(), "value": self.chain.balance(self.pubkey(params[0]))}

    def get_token_account_balance(self, params: list[Any]) -> Any:
        address = self.pubkey(params[0])
        amount = self.chain.token_balance(address)
        if amount is None:
            raise JsonRpcFault(INVALID_PARAMS, "Invalid param: could not find account")
        with self.chain._lock:
            parsed = self.chain._token_account(address)
            decimals = self.chain._decimals(parsed[0]) if parsed else 0
        return {"context": self.context(), "value": _ui_amount(amount, decimals)}

    def get_account_info(self, params: list[Any]) -> Any:
        with self.chain._lock:
            acct = self.chain.svm.get_account(self.pubkey(params[0]))
        if acct is None or acct.lamports == 0:
            return {"context": self.context(), "value": None}
        return {"context": self.context(), "value": {
            "lamports": acct.lamports, "owner": str(acct.owner), "executable": acct.executable,
            "rentEpoch": 18446744073709551615, "space": len(acct.data),
            "data": [base64.b64encode(bytes(acct.data)).decode(), "base64"]}}

    def get_latest_blockhash(self, params: list[Any]) -> Any:
        value = {"blockhash": str(self.chain.latest_blockhash()),
                 "lastValidBlockHeight": self.chain.svm.get_clock().slot + 150}
        return {"context": self.context(), "value": value}

    def send_transaction(self, params: list[Any]) -> Any:
        opts = self.config(params, 1)
        try:
            tx = Transaction.from_bytes(base64.b64decode(str(params[0]), validate=True))
        except (binascii.Error, ValueError) as exc:
            raise JsonRpcFault(INVALID_PARAMS, f"failed to deserialize transaction: {exc}") from exc
        if not opts.get("skipPreflight", False):
            with self.chain._lock:
                sim = self.chain.svm.simulate_transaction(tx)
            if isinstance(sim, FailedTransactionMetadata):
                logs = list(sim.meta().logs())
                raise JsonRpcFault(PREFLIGHT_FAILURE, f"Transaction simulation failed: {sim.err()}",
                                   {"err": str(sim.err()), "logs": logs})
        return self.chain.send(tx).signature if self.clock is None else self.clock.send(tx)

    def request_airdrop(self, params: list[Any]) -> Any:
        wallet = self.pubkey(params[0])
        self.chain.airdrop(wallet, int(params[1]))
        return str(wallet)  # LiteSVM airdrops carry no signature to report

    def mint_tokens(self, params: list[Any]) -> Any:
        symbol = str(params[1]).upper()
        if symbol not in self.chain.mints:
            raise JsonRpcFault(INVALID_PARAMS, f"Invalid param: no local mint {symbol}")
        return str(self.chain.mint_tokens(self.pubkey(params[0]), symbol, int(params[2])))

    def get_slot(self, params: list[Any]) -> Any:
        return self.chain.slot()

    def methods(self) -> dict[str, Callable[[list[Any]], Any]]:
        return {
            "getTransaction": self.get_transaction,
            "getSignatureStatuses": self.get_signature_statuses,
            "getBalance": self.get_balance,
            "getTokenAccountBalance": self.get_token_account_balance,
            "getAccountInfo": self.get_account_info,
            "getLatestBlockhash": self.get_latest_blockhash,
            "sendTransaction": self.send_transaction,
            "requestAirdrop": self.request_airdrop,
            "envelopay_mintTokens": self.mint_tokens,
            "getSlot": self.get_slot,
        }

    def handle(self, method: str, params: list[Any]) -> Any:
        fn = self.methods().get(method)
        if fn is None:
            raise JsonRpcFault(-32601, "Method not found")
        if method not in ("getLatestBlockhash", "getSlot") and not params:
            raise JsonRpcFault(INVALID_PARAMS, "Invalid params")
        return fn(params)

