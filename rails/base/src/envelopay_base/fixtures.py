"""Serve the Base JSON-RPC fixture documents (fixtures/rpc/base/*.json) as a node would.

Pure functions, used by the rail's respx tests and by bench/verify.py's loopback
server: `rpc_answer(document, request_body)` → (HTTP status, JSON body), batches
included. `expectation_of(document)` turns a document's expectation into the core type.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from envelopay.rails.interface import Expectation

FIXTURE_DIR = Path(__file__).resolve().parents[4] / "fixtures" / "rpc" / "base"


def load_documents(directory: Path = FIXTURE_DIR) -> dict[str, dict[str, Any]]:
    """All fixture documents by name."""
    docs: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text())
        docs[str(doc["name"])] = doc
    return docs


def expectation_of(document: Mapping[str, Any]) -> Expectation:
    want = document["expectation"]
    return Expectation(
        chain=want["chain"],
        token=want["token"],
        amount=int(want["amount"]),
        recipient=want["recipient"],
        amount_policy=want.get("amount_policy", "exact"),
        payer=want.get("payer"),
        not_before=datetime.fromisoformat(want["not_before"]) if want.get("not_before") else None,
        not_after=datetime.fromisoformat(want["not_after"]) if want.get("not_after") else None,
        confirmations=int(want.get("confirmations", 2)),
    )


def _one(document: Mapping[str, Any], call: Any) -> dict[str, Any]:
    if not isinstance(call, Mapping) or "method" not in call:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid request"}}
    method = call["method"]
    answer: dict[str, Any] = {"jsonrpc": "2.0", "id": call.get("id")}
    errors = document.get("errors") or {}
    rpc = document["rpc"]
    if method in errors:
        answer["error"] = errors[method]
    elif method in rpc:
        answer["result"] = rpc[method]
    elif method in ("eth_getBlockByHash", "eth_getBlockByNumber"):
        answer["result"] = None
    else:
        answer["error"] = {"code": -32601, "message": f"the method {method} does not exist/is not available"}
    return answer


def rpc_answer(document: Mapping[str, Any], body: bytes | str | Any) -> tuple[int, Any]:
    """The (HTTP status, JSON body) a node holding `document`'s state answers to `body`."""
    status = int(document.get("http_status", 200))
    if status != 200:
        return status, {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "unavailable"}}
    payload = json.loads(body) if isinstance(body, bytes | str) else body
    if isinstance(payload, list):
        return 200, [_one(document, call) for call in payload]
    return 200, _one(document, payload)
