"""The enforcer's answers as JSON, written once for the send and the spend side: a verdict
record (`Verdict`: a `status` among its own, the rest strings, only the set fields sent)
and an operator's decision on a held request (`Decided`: ok, or the state seen)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Generic, Self, TypeVar

__all__ = ["Decided", "Verdict", "fields_from_json", "set_fields"]


def set_fields(obj: Any) -> dict[str, Any]:
    """A result dataclass as JSON: every field that is set (neither None nor ""). Read
    field by field (not dataclasses.asdict, which deep-copies): one per answer."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if value is not None and value != "":
            out[f.name] = value
    return out


def fields_from_json(cls: Any, data: Any, statuses: Collection[str], what: str) -> dict[str, Any]:
    """The fields of a result dataclass (a string `status` among `statuses`, the rest
    strings) read back from its JSON: a field defaulting to "" is str()'d, one defaulting
    to None is kept only when it is a string. ValueError for anything else."""
    if not isinstance(data, dict) or data.get("status") not in statuses:
        raise ValueError(f"not a {what}: {data!r}")
    out: dict[str, Any] = {"status": data["status"]}
    for f in fields(cls):
        if f.name == "status":
            continue
        value = data.get(f.name)
        if f.default == "":
            out[f.name] = str(value if value is not None else "")
        else:
            out[f.name] = value if isinstance(value, str) else None
    return out


class Verdict:
    """A frozen dataclass of answer fields, read and written as JSON. A subclass names its
    statuses and what it is called in an error."""

    __slots__ = ()
    STATUSES: ClassVar[Collection[str]]
    WHAT: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        return set_fields(self)

    @classmethod
    def from_json(cls, data: Any) -> Self:
        return cls(**fields_from_json(cls, data, cls.STATUSES, cls.WHAT))


V = TypeVar("V", bound=Verdict)


@dataclass(frozen=True, slots=True)
class Decided(Generic[V]):
    """An operator's decision on a held request: ok, or a conflict naming the state seen
    (the state after the decision, or the state observed on conflict)."""

    ok: bool
    state: str
    detail: str = ""
    disposition: V | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "state": self.state, "detail": self.detail}
        if self.disposition is not None:
            out["disposition"] = self.disposition.to_json()
        return out
