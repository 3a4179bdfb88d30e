"""A message from loose fields, the way a front end gathers them: a JSON object of body
fields, options given one by one over it, values that are JSON or plain text. Pure (no
I/O); every refusal is a UsageError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from envelopay.errors import UsageError
from envelopay.protocol import outside_json
from envelopay.protocol.messages import Message, MessageType, model_for

__all__ = ["TYPE_NAMES", "message_from_fields", "message_type", "wanted"]

TYPE_NAMES = ("which", "methods", "pay", "order", "fulfill", "invoice", "offer", "accept", "oops")


_WANTED = {
    "dict_type": "must be a JSON object",
    "string_type": "must be text",
    "int_type": "must be a whole number",
    "missing": "is required",
    "json_invalid": "must be valid JSON",
}


def wanted(err: Mapping[str, Any]) -> str:
    """What a field wants, in the project's words rather than pydantic's (one error of
    `ValidationError.errors()`)."""
    kind = str(err.get("type", ""))
    if kind in _WANTED:
        return _WANTED[kind]
    ctx = err.get("ctx") or {}
    if kind == "string_too_long":
        return f"is too long (at most {ctx.get('max_length')} characters)"
    if kind == "string_too_short":
        return f"is too short (at least {ctx.get('min_length')} characters)"
    msg = str(err.get("msg", "is not valid"))
    return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")


def message_type(name: str) -> MessageType:
    """One of the nine types, in any case."""
    if name.lower() not in TYPE_NAMES:
        raise UsageError(f"TYPE: {name!r} is not one of {', '.join(t.upper() for t in TYPE_NAMES)}")
    return MessageType(name.lower())


def _json(name: str, value: str) -> Any:
    try:
        return outside_json.loads(value)
    except outside_json.OutsideJsonError as exc:
        raise UsageError(f"--{name}: {exc}") from exc


def _json_or_text(name: str, value: str) -> Any:
    """JSON when it is JSON; text when it is not; refused when it is JSON no mail can carry
    (too deep, a number past the digit limit, a lone surrogate)."""
    try:
        return outside_json.loads(value)
    except outside_json.OutsideJsonError as exc:
        if exc.code == "invalid_json":
            if not outside_json.text_ok(value):
                raise UsageError(f"--{name}: not valid text (a lone surrogate or NUL)") from exc
            return value
        raise UsageError(f"--{name}: {exc}") from exc


def message_from_fields(
    kind: MessageType,
    base: Mapping[str, Any],
    *,
    plain: Mapping[str, str | None],
    json_fields: Mapping[str, str | None],
    json_or_text: Mapping[str, str | None],
    code: str | None,
) -> Message:
    """`base` overridden by the given fields (`plain` as they are, `json_fields` parsed
    as JSON, `json_or_text` as JSON when it parses, else text; `code` into `error`),
    validated with the wire rules (version defaults to 0.1.0)."""
    data = dict(base)
    data.update({k: v for k, v in plain.items() if v is not None})
    for name, raw in json_fields.items():
        if raw is not None:
            data[name] = _json(name, raw)
    for name, raw in json_or_text.items():
        if raw is not None:
            data[name] = _json_or_text(name, raw)
    if code is not None:
        error = data.get("error")
        data["error"] = {**(error if isinstance(error, dict) else {}), "code": code}
    data.setdefault("v", "0.1.0")
    data["type"] = kind.value
    # The body is one level: its fields' JSON may nest MAX_DEPTH levels under it.
    problem = outside_json.value_problem(data, outside_json.MAX_DEPTH + 1)
    if problem is not None:
        raise UsageError(f"--{problem.path.replace('_', '-') or 'json-file'}: {problem}")
    try:
        return model_for(kind).model_validate(data, context={"wire": True})  # type: ignore[return-value]
    except ValidationError as exc:
        lines = []
        for e in exc.errors(include_url=False):
            where = ".".join(str(x) for x in e["loc"] if not (isinstance(x, str) and "[" in x))
            lines.append(f"{where or 'body'}: {wanted(e)}")
        raise UsageError(f"invalid {kind.keyword} fields:\n  " + "\n  ".join(lines)) from exc
