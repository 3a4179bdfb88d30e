"""Deterministic responders: an email address that is a tool.

A responder is an address, a pydantic request schema and a handler. It reads the typed
``application/json`` part of a request (see toolmail), validates it against the schema
(unknown fields refused, nothing interpreted), runs the handler and replies with the
same format plus an explicit status. Errors are structured, never prose::

    {"status": "ok",    "endpoint": "kv@garden.local", "result": {...}}
    {"status": "error", "endpoint": "kv@garden.local",
     "error": {"code": "invalid_field", "field": "key", "detail": "..."}}

Error codes: missing_payload, invalid_json, not_an_object, payload_too_large,
invalid_field, not_found, handler_failed.

Same request → same reply: a responder holds no state, so a redelivered request gets
an identical answer (its Message-ID is derived from the request's).

Reference responder: ``kv@`` — a read of a fixed key-value table
(envelopay.endpoints.reference:kv_get)::

    request  {"key": "spec.version"}
    reply    {"status": "ok", "result": {"key": "spec.version", "value": "0.1.0"}}
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from envelopay.config import ResponderConfig, resolve_ref
from envelopay.endpoints.toolmail import build_tool_mail, read_tool_mail
from envelopay.errors import ConfigError
from envelopay.protocol.autosubmit import AUTO_REPLIED

__all__ = ["Responder", "ResponderError"]


class ResponderError(Exception):
    """A handler's structured refusal (e.g. not_found); becomes {"status": "error"}."""

    def __init__(self, code: str, detail: str = "", field: str | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail
        self.field = field


def _error(code: str, detail: str, field: str | None = None) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "detail": detail}
    if field is not None:
        err["field"] = field
    return {"status": "error", "error": err}


@dataclass(frozen=True, slots=True)
class Responder:
    address: str
    schema: type[BaseModel]
    handler: Callable[[Any], Any]
    description: str = ""

    @classmethod
    def from_config(cls, cfg: ResponderConfig) -> Responder:
        schema = resolve_ref(cfg.schema_ref)
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise ConfigError(f"responder {cfg.address}: {cfg.schema_ref!r} is not a pydantic model")
        handler = resolve_ref(cfg.handler)
        if not callable(handler) or inspect.iscoroutinefunction(handler):
            raise ConfigError(f"responder {cfg.address}: handler must be a plain function")
        return cls(cfg.address.lower(), schema, handler, cfg.description)

    def answer(self, payload: dict[str, Any] | None, problem: str | None = None) -> dict[str, Any]:
        """The reply payload for one request payload (pure)."""
        if payload is None:
            out = _error(problem or "missing_payload", "the request needs one application/json part")
        else:
            try:
                params = self.schema.model_validate(payload)
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(x) for x in err["loc"]) or None
                out = _error("invalid_field", err["msg"], field)
            else:
                try:
                    result = self.handler(params)
                    if isinstance(result, BaseModel):
                        result = result.model_dump(mode="json")
                    json.dumps(result, allow_nan=False)
                    out = {"status": "ok", "result": result}
                except ResponderError as exc:
                    out = _error(exc.code, exc.detail, exc.field)
                except Exception as exc:  # operator code failed: say so as data
                    out = _error("handler_failed", type(exc).__name__)
        return {**out, "endpoint": self.address}

    def respond(self, raw: bytes, *, now: datetime, domain: str) -> bytes | None:
        """Answer one request mail; None when there is nobody to answer (no sender)."""
        req = read_tool_mail(raw)
        if req.sender is None or req.sender == self.address:
            return None  # never answer ourselves: no loops
        if req.no_answer is not None:
            # RFC 3834 §2: "Automatic responses SHOULD NOT be issued in response to any
            # message which contains an Auto-Submitted header field ... other than 'no'"
            # (nor to list or bulk mail, nor to a null return path): no answer at all.
            return None
        reply = self.answer(req.payload, req.problem)
        # Deterministic reply id: a redelivered request yields the same reply mail.
        seed = (req.message_id or hashlib.sha256(raw).hexdigest()).encode()
        mid = f"<r.{hashlib.sha256(seed).hexdigest()[:32]}@{domain}>"
        status = reply["status"]
        human = (
            f"{self.address} answered: {status}.\n"
            "The machine-readable reply is the attached application/json part.\n"
        )
        subject = req.subject if req.subject.lower().startswith("re:") else f"Re: {req.subject}".strip()
        return build_tool_mail(
            sender=self.address,
            recipient=req.sender,
            subject=subject[:200],
            payload=reply,
            human=human,
            message_id=mid,
            now=now,
            call_id=req.call_id,
            in_reply_to=req.message_id,
            auto_submitted=AUTO_REPLIED,  # every responder answer is automatic
        )
