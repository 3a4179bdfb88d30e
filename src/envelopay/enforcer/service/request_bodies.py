"""Decoding an agent's request body: bytes → a JSON object the policy can read, or a
refusal with a stable code. Pure; the HTTP service calls it before anything else.

Refused (issue 11, item 6: each of these once gave HTTP 500):
- not UTF-8, not JSON, or not a JSON object               -> invalid_json
- NaN / Infinity, or one key twice in an object            -> invalid_json
- nesting deeper than MAX_DEPTH                            -> too_deep
- an integer longer than MAX_DIGITS digits, or a float
  literal longer than MAX_DIGITS characters                -> number_too_long
- a string holding a lone surrogate (JSON "\\udcff")       -> invalid_text
  (it cannot be encoded as UTF-8, so no mail could carry it)
"""

from __future__ import annotations

from typing import Any

from envelopay.enforcer.send.model import Disposition
from envelopay.protocol.outside_json import MAX_DIGITS, OutsideJsonError, loads

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "decode_send_body", "json_problem"]

MAX_DEPTH = 32


def _text_ok(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_problem(value: Any) -> tuple[str, str] | None:
    """(code, detail) when a decoded JSON value nests deeper than MAX_DEPTH or holds a
    string (key or value) that is not valid Unicode; None when it is fine. Iterative."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                return "too_deep", f"JSON nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for k, v in item.items():
                    if not _text_ok(k):
                        return "invalid_text", "a key is not valid Unicode (a lone surrogate)"
                    stack.append((v, depth + 1))
            else:
                stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str) and not _text_ok(item):
            return "invalid_text", "a string is not valid Unicode (a lone surrogate)"
    return None


def _refusal(code: str, detail: str) -> Disposition:
    return Disposition(status="blocked", reason=f"invalid request: {detail}", code=code)


def decode_send_body(data: bytes) -> dict[str, Any] | Disposition:
    """The request object, or a `blocked` disposition with its code. Never raises."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _refusal("invalid_json", "the body is not UTF-8")
    try:
        # The one reader of outside JSON (depth before decoding, long numbers, NaN, a key
        # twice); the texts are judged below, as the send path has always judged them.
        value = loads(text, MAX_DEPTH, text=False)
    except OutsideJsonError as exc:
        if exc.code == "too_deep":
            return _refusal("too_deep", f"JSON nested deeper than {MAX_DEPTH} levels")
        if exc.code == "number_too_long":
            return _refusal(exc.code, str(exc))
        detail = str(exc) if "twice" in str(exc) or "is not JSON" in str(exc) else "a JSON object is required"
        return _refusal("invalid_json", detail)
    if not isinstance(value, dict):
        return _refusal("invalid_json", "a JSON object is required")
    problem = json_problem(value)
    if problem is not None:
        return _refusal(*problem)
    return value
