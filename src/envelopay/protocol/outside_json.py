"""JSON from outside — a CLI option, a file, a webhook body — read into a value, or
refused with a stable code. Pure; never raises anything but `OutsideJsonError`.

Each refusal below once escaped as a traceback, a 500 or a half-written row (issue 29):

- not UTF-8, not JSON, NaN/Infinity, one key twice in an object  -> invalid_json
- nesting deeper than MAX_DEPTH (200,000 deep is a RecursionError
  in the decoder, deep but parseable JSON fails later to serialize) -> too_deep
- an integer longer than MAX_DIGITS digits (int() refuses past 4,300
  with a ValueError), or a float literal as long                    -> number_too_long
- a string (key or value) holding a lone surrogate ("\\ud800" is
  valid JSON, and no UTF-8 mail or ledger row can hold it) or NUL
  (PostgreSQL's text and jsonb refuse it)                           -> invalid_text
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "OutsideJsonError", "loads", "text_ok", "too_deep", "value_problem"]

MAX_DEPTH = 32
MAX_DIGITS = 64  # an amount in the smallest unit of a 256-bit token has at most 78; JSON ints are counts

Code = Literal["invalid_json", "too_deep", "number_too_long", "invalid_text"]


class OutsideJsonError(ValueError):
    """JSON refused; `code` says why in one stable word, the message in plain words."""

    def __init__(self, code: Code, detail: str, path: str = "") -> None:
        super().__init__(detail)
        self.code: Code = code
        self.path = path  # where in the value (`task.items.0`); "" for the whole


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_DIGITS:
        raise OutsideJsonError("number_too_long", f"an integer longer than {MAX_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_DIGITS:
        raise OutsideJsonError("number_too_long", f"a number longer than {MAX_DIGITS} characters")
    return float(text)


def _constant(name: str) -> Any:
    raise OutsideJsonError("invalid_json", f"{name} is not JSON")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise OutsideJsonError("invalid_json", "a key occurs twice in one object")
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int, parse_float=_float,
                            parse_constant=_constant)


def text_ok(value: str) -> bool:
    """Whether a string can go into a UTF-8 mail and either ledger: no lone surrogate, no NUL."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def value_problem(value: Any, max_depth: int = MAX_DEPTH, *, text: bool = True) -> OutsideJsonError | None:
    """Why a decoded value cannot go out (nested deeper than `max_depth`, or, with `text`,
    a string that is not valid text), or None; `path` names where (`a.b.0`, "" for the
    value itself). Iterative: a deep value costs no stack."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > max_depth:
                return OutsideJsonError("too_deep", f"nested deeper than {max_depth} levels", path)
            if isinstance(item, dict):
                for k, v in item.items():
                    where = f"{path}.{k}" if path else str(k)
                    if text and isinstance(k, str) and not text_ok(k):
                        return OutsideJsonError("invalid_text", "a key is not valid text "
                                                "(a lone surrogate or NUL)", path)
                    stack.append((v, depth + 1, where))
            else:
                stack.extend((v, depth + 1, f"{path}.{i}" if path else str(i)) for i, v in enumerate(item))
        elif text and isinstance(item, str) and not text_ok(item):
            return OutsideJsonError("invalid_text", "not valid text (a lone surrogate or NUL)", path)
    return None


# A JSON string (skipped whole: brackets in it are text) or one bracket.
_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"|[\[\]{}]')


def too_deep(data: str, max_depth: int) -> bool:
    """Whether brackets outside strings nest deeper than `max_depth`, found before decoding:
    the decoder's own guard is the recursion limit, and a process that imported py-evm
    (eth-tester) has it at 100,000, where 200,000 levels overflow the C stack (a segfault,
    seen in the tests, instead of a RecursionError)."""
    if data.count("[") + data.count("{") <= max_depth:
        return False  # not enough brackets to nest that deep (most texts)
    depth = 0
    for m in _TOKEN.finditer(data):
        ch = m.group()
        if ch in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def loads(data: str | bytes, max_depth: int = MAX_DEPTH, *, text: bool = True) -> Any:
    """The JSON value of `data`, judged by the rules above; OutsideJsonError otherwise.
    `text=False` leaves strings unjudged (a reader that checks the few it uses)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OutsideJsonError("invalid_json", "not UTF-8") from exc
    if too_deep(data, max_depth):
        raise OutsideJsonError("too_deep", f"nested deeper than {max_depth} levels")
    try:
        value = _DECODER.decode(data)
    except OutsideJsonError:
        raise
    except RecursionError as exc:
        raise OutsideJsonError("too_deep", f"nested deeper than {max_depth} levels") from exc
    except json.JSONDecodeError as exc:
        raise OutsideJsonError("invalid_json", f"not valid JSON ({exc.msg} at column {exc.colno})") from exc
    except ValueError as exc:  # the decoder's other refusals
        raise OutsideJsonError("invalid_json", f"not valid JSON ({exc})") from exc
    # Brackets outside strings bounded the depth above; the texts are what is left to judge.
    if text and not _plain(value):
        problem = value_problem(value, max_depth, text=True)
        if problem is not None:
            raise problem
    return value


def _plain(value: Any) -> bool:
    """True when no string in `value` holds a lone surrogate or NUL, in one pass of the C
    encoder (False: look closer; an escaped backslash before u0000 reads as NUL here)."""
    dumped = json.dumps(value, ensure_ascii=False)
    try:
        dumped.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\\u0000" not in dumped
