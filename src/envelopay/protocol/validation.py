"""Stages 4 to 7 of parsing (SPEC.md "Validation and OOPS precedence"), for a body
already bound to the subject's type: the envelope (`v`, `type`), the version, the body
type against the subject's, and the fields by the message's model — each failure one
Problem, the field codes in the spec's order (missing_wallet > missing_field >
invalid_field)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.lenient import LENIENT_PREFIX
from envelopay.protocol.messages import SUPPORTED_VERSIONS, Message, MessageType, Methods, model_for
from envelopay.protocol.parsed import Problem

_PROBLEM_ORDER: dict[OopsCode, int] = {
    OopsCode.MISSING_WALLET: 0,
    OopsCode.MISSING_FIELD: 1,
    OopsCode.INVALID_FIELD: 2,
}

_VERSION = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})(?:\.[0-9]{1,9})?(?:[-+][0-9A-Za-z.-]{1,64})?")


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for item in loc:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out


def _field_problems(kind: MessageType, err: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for e in err.errors(include_url=False):
        loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and "[" in x))
        path = _loc(loc)
        last = loc[-1] if loc else None
        # An empty or null wallet is no wallet (decision, SPEC.md).
        missing = e["type"] == "missing" or (
            last == "wallet" and (e["type"] == "string_too_short" or e.get("input") is None)
        )
        if missing and last == "wallet" and kind in (MessageType.INVOICE, MessageType.METHODS):
            # Spec code: INVOICE without `wallet`, or a METHODS rail without one.
            problems.append(Problem(OopsCode.MISSING_WALLET, f"{path}: a wallet is required", path))
        elif missing:
            problems.append(Problem(OopsCode.MISSING_FIELD, f"{path}: required", path))
        else:
            problems.append(Problem(OopsCode.INVALID_FIELD, f"{path or 'body'}: {e['msg']}", path or None))
    return problems


def _validate(
    kind: MessageType, body: dict[str, Any], warnings: list[str], lenient: bool = False
) -> tuple[Message | None, list[Problem]]:
    """Envelope, version and field checks for a body already bound to `kind`."""
    for key in ("v", "type"):
        if key not in body:
            return None, [Problem(OopsCode.MISSING_FIELD, f"the JSON body needs `{key}`", key)]
    v, btype = body["v"], body["type"]
    if not isinstance(v, str) or (vm := _VERSION.fullmatch(v)) is None:
        return None, [Problem(OopsCode.INVALID_FIELD, "`v` must be a version string like 0.1.0", "v")]
    if not isinstance(btype, str):
        return None, [Problem(OopsCode.INVALID_FIELD, "`type` must be a string", "type")]
    version = (int(vm.group(1)), int(vm.group(2)))
    if version not in SUPPORTED_VERSIONS:
        return None, [
            Problem(OopsCode.UNSUPPORTED_VERSION, f"version {v} is not supported (0.1.x, 0.2.x)", "v")
        ]
    data = dict(body)
    data["type"] = kind.value  # the subject's type governs
    prepaid = ("amount", "token", "chain", "proof")
    if kind is MessageType.ORDER:
        present = [k for k in prepaid if k in data]
        if present and version < (0, 2):
            # In 0.1 these are unknown fields, which "must be ignored".
            for k in present:
                del data[k]
            warnings.append("prepaid ORDER fields ignored: they need v 0.2.x")
        elif present and len(present) < len(prepaid):
            missing = [k for k in prepaid if k not in data]
            return None, [
                Problem(
                    OopsCode.MISSING_FIELD,
                    f"a prepaid ORDER needs amount, token, chain and proof; missing {', '.join(missing)}",
                    missing[0],
                )
            ]
    # `"PAY"` for `"pay"` is a spelling slip, not another type: it gets the field codes.
    other_type = btype.strip().lower() != kind.value
    model = model_for(kind)
    try:
        message = model.model_validate(data, context={"wire": True, "lenient": lenient})
    except ValidationError as err:
        problems = _field_problems(kind, err)
        if other_type:
            return None, [
                Problem(
                    OopsCode.TYPE_MISMATCH,
                    f"subject says {kind.keyword} but the body says {btype!r}"
                    f" and is not a valid {kind.keyword}",
                    "type",
                )
            ]
        problems.sort(key=lambda p: _PROBLEM_ORDER.get(p.code, 9))
        return None, problems
    if btype != kind.value:
        warnings.append(f"body type {btype!r} disagrees with the subject; the subject ({kind.keyword}) rules")
    if isinstance(message, Methods) and any(r.price is None for r in message.rails):
        warnings.append(f"{LENIENT_PREFIX} METHODS rail without price: price on request")  # L3
    return message, []  # type: ignore[return-value]
