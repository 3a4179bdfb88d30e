"""The `status` extension (SPEC.md "Status while working"): words and values, no I/O.

Two message types beyond the spec's nine, named as the protocol author's roadmap names
them: WAIT (worker -> buyer: the job of an ORDER is queued, running, done, ...) and
WHATSUP (buyer -> worker: how is it going?). The spec answers an unknown keyword with
OOPS `unknown_type`, so a peer that did not advertise the extension must never receive
either: a buyer names `"extensions": ["status"]` in its WHICH and ORDER, a worker answers
such a WHICH with a METHODS naming it too, and only a receiver whose
`ParseOptions.extensions` holds `"status"` reads the types.
Neither message moves a flow: they are logged in it, its state stays as it was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from envelopay.protocol.messages import Message, Methods, Order, Wait, Which

__all__ = [
    "FINAL_STATES",
    "JOB_STATES",
    "STATUS",
    "advertises",
    "body_advertises",
    "stamp",
    "state_line",
    "wait_message",
]

STATUS = "status"

# A job's states (worker/job_states.py holds the table that moves between them).
JOB_STATES: tuple[str, ...] = ("queued", "running", "done", "failed", "held", "refunding", "refunded")
# States after which no further WAIT is due: the FULFILL or OOPS has been (or is) sent.
FINAL_STATES: frozenset[str] = frozenset({"done", "failed", "refunded"})


def advertises(message: Message | None, extension: str = STATUS) -> bool:
    """A WHICH, METHODS or ORDER that names `extension` in its `extensions`."""
    if not isinstance(message, Which | Methods | Order) or message.extensions is None:
        return False
    return extension in message.extensions


def body_advertises(body: Mapping[str, Any] | None, extension: str = STATUS) -> bool:
    """The same question about a stored body (a flow's recorded ORDER or METHODS)."""
    if not isinstance(body, Mapping):
        return False
    names = body.get("extensions")
    return isinstance(names, Sequence) and not isinstance(names, str) and extension in names


def stamp(when: datetime) -> str:
    """ISO 8601 in UTC to the second, `Z`-suffixed: how WAIT writes its times."""
    if when.tzinfo is None:
        raise ValueError("a WAIT time must be timezone-aware")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def wait_message(
    *,
    id: str,
    order_ref: str,
    state: str,
    times: Mapping[str, datetime],
    ref: str | None = None,
    note: str | None = None,
) -> Wait:
    """A WAIT for the job of `order_ref`, its times in the order of `JOB_STATES`."""
    at = dict(_in_state_order({k: stamp(v) for k, v in times.items()}))
    return Wait(id=id, order_ref=order_ref, state=state, at=at, ref=ref, note=note or f"job {state}")


def _in_state_order(at: Mapping[str, str]) -> list[tuple[str, str]]:
    # A stored WAIT may come back with its keys sorted: the states' own order is the one.
    order = {s: i for i, s in enumerate(JOB_STATES)}
    return sorted(at.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


def state_line(wait: Wait) -> str:
    """One line for a person: `running (queued 23:01:02Z, running 23:01:03Z)`."""
    times = ", ".join(f"{k} {v}" for k, v in _in_state_order(wait.at))
    return f"{wait.state} ({times})" if times else wait.state
