"""A JSON-RPC dev node over a LocalChain: the methods the Base rail's RPC backend uses.

Serve it with `envelopay.testing.rpc_server.JsonRpcServer(base_rpc_handler(chain))` and
point an rpc rail at the URL (network "local", chain_id=chain.chain_id). Answers are
shaped like geth's: camelCase keys, hex quantities, `input` for calldata. It lets the
RPC backend run the conformance kit against real transactions, over real HTTP.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from envelopay.testing.rpc_server import JsonRpcFault
from envelopay_base.local import LocalChain

_CAMEL = re.compile(r"_([a-z])")
_RENAME = {"data": "input"}  # eth-tester's transaction `data` is JSON-RPC's `input`


def to_json_rpc(value: Any, *, transaction: bool = False) -> Any:
    """eth-tester values → JSON-RPC wire form (hex quantities, camelCase, lists)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _CAMEL.sub(lambda m: m.group(1).upper(), str(key))
            if transaction:
                name = _RENAME.get(name, name)
            out[name] = to_json_rpc(item)
        return out
    if isinstance(value, list | tuple):
        return [to_json_rpc(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


def _block_id(tag: Any) -> int | str:
    if tag in (None, "latest", "pending", "safe", "finalized"):
        return "latest"
    if tag == "earliest":
        return "earliest"
    return int(str(tag), 16)


def base_rpc_handler(chain: LocalChain) -> Callable[[str, list[Any]], Any]:
    """handler(method, params) for JsonRpcServer, answering from `chain`."""
    from eth_tester.exceptions import BlockNotFound, TransactionFailed, TransactionNotFound, ValidationError
    from eth_utils.exceptions import ValidationError as EvmValidationError

    tester = chain.tester
    refused = (TransactionFailed, ValidationError, EvmValidationError)

    def fault(exc: Exception) -> JsonRpcFault:
        text = str(exc)
        if "afford" in text or "insufficient" in text.lower():
            return JsonRpcFault(-32000, f"insufficient funds for gas * price + value: {text}")
        return JsonRpcFault(-32000, text)

    def handler(method: str, params: list[Any]) -> Any:
        try:
            if method == "eth_chainId":
                return hex(chain.chain_id)
            if method == "eth_blockNumber":
                return hex(chain.head())
            if method == "eth_getTransactionByHash":
                try:
                    return to_json_rpc(tester.get_transaction_by_hash(params[0]), transaction=True)
                except TransactionNotFound:
                    return None
            if method == "eth_getTransactionReceipt":
                try:
                    return to_json_rpc(tester.get_transaction_receipt(params[0]))
                except TransactionNotFound:
                    return None
            if method == "eth_getBlockByHash":
                try:
                    return to_json_rpc(tester.get_block_by_hash(params[0]))
                except BlockNotFound:
                    return None
            if method == "eth_getBlockByNumber":
                try:
                    return to_json_rpc(tester.get_block_by_number(_block_id(params[0] if params else None)))
                except BlockNotFound:
                    return None
            if method == "eth_getTransactionCount":
                return hex(tester.get_nonce(params[0]))
            if method == "eth_getBalance":
                return hex(tester.get_balance(params[0]))
            if method == "eth_call":
                call = {"from": chain.faucet, **params[0]}
                result = tester.call(call)
                return result if isinstance(result, str) else "0x" + bytes(result).hex()
            if method == "eth_estimateGas":
                return hex(tester.estimate_gas(dict(params[0])))
            if method == "eth_maxPriorityFeePerGas":
                return hex(10**9)
            if method == "eth_sendRawTransaction":
                return chain.submit(bytes.fromhex(str(params[0]).removeprefix("0x")))
        except refused as exc:
            raise fault(exc) from exc
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise JsonRpcFault(-32602, f"invalid params: {exc}") from exc
        raise JsonRpcFault(-32601, f"the method {method} does not exist/is not available")

    return handler
