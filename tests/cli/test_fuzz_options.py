"""Issue 29: every CLI option that takes JSON under 100,000 hostile values (seeded,
tests/fuzz_json.py), through the functions the commands call, in-process: --task (which,
order), --result (fulfill), --request (call), and compose's --task/--result (JSON or
text), --proof/--rails/--give/--want (JSON) and --json-file. One real invocation per
class of input is in tests/cli/test_outside_values.py.

Asserted for every value: a message (or a request object) or a UsageError naming the
option — never another exception (a traceback) — and every message accepted composes
into mail (a sample of them is composed: the check is the costly part)."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from tests.fuzz_json import texts

from envelopay.client import commands as c
from envelopay.errors import UsageError
from envelopay.protocol import outside_json
from envelopay.protocol.compose import compose
from envelopay.protocol.fields import message_from_fields
from envelopay.protocol.messages import Message, MessageType
from envelopay.protocol.outbound import Outbound

N = int(100_000 * float(os.environ.get("ENVELOPAY_FUZZ_SCALE", "1")))
COMPOSE_EVERY = 25
PAY = {"amount": "5", "token": "USDC", "chain": "solana-local"}


def _fields(kind: MessageType, base: dict[str, Any], **given: dict[str, str | None]) -> Message:
    return message_from_fields(kind, base, plain={}, json_fields=given.get("json", {}),
                               json_or_text=given.get("text", {}), code=None)


def _json_file(text: str) -> Message:
    """What `compose --json-file` does with the file's text (cli/protocol_cmds.py)."""
    try:
        data = outside_json.loads(text.encode("utf-8", "surrogatepass"))
    except outside_json.OutsideJsonError as exc:
        raise UsageError(f"--json-file: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError("--json-file: must hold a JSON object")
    return _fields(MessageType.ORDER, {"id": "o", "task": {}, **data})


OPTIONS: dict[str, Callable[[str], Any]] = {
    "--task": lambda x: c.draft("order", id="ord_f", task=c.parse_json_option(x, "--task")),
    "--result": lambda x: c.draft("fulfill", id="ful_f", order_ref="ord_f",
                                  result=c.parse_json_option(x, "--result")),
    "--request": lambda x: c.call_request(x),
    "compose --task": lambda x: _fields(MessageType.ORDER, {"id": "o"}, text={"task": x}),
    "compose --result": lambda x: _fields(MessageType.FULFILL, {"id": "f", "order_ref": "o"},
                                          text={"result": x}),
    "compose --proof": lambda x: _fields(MessageType.PAY, {"id": "p", **PAY}, json={"proof": x}),
    # --rails is an array: the value is one rail of it
    "compose --rails": lambda x: _fields(MessageType.METHODS, {"id": "m"}, json={"rails": f"[{x}]"}),
    "compose --give": lambda x: _fields(MessageType.OFFER, {"id": "x", "want": {**PAY}, "wallet": "w"},
                                        json={"give": x}),
    "compose --json-file": _json_file,
}
# One document the options can all take somewhere: a task, a request, a proof, a leg, a rail.
GOOD = {"name": "digest", "text": "abc", "tx": "5" * 64, "key": "spec.version", "amount": "5",
        "token": "USDC", "chain": "solana-local", "to": "w", "wallet": "w", "price": "5",
        "proof": {"tx": "5" * 64}}


def test_a_hundred_thousand_hostile_json_values() -> None:
    names = list(OPTIONS)
    took: dict[str, int] = dict.fromkeys(names, 0)
    refused: dict[str, int] = dict.fromkeys(names, 0)
    composed = 0
    now = datetime(2026, 12, 4, tzinfo=UTC)
    for i, text in enumerate(texts(20261204, N, GOOD)):
        name = names[i % len(names)]
        try:
            made = OPTIONS[name](text)
        except UsageError as exc:
            refused[name] += 1
            assert str(exc).startswith("--") or "fields" in str(exc), (name, str(exc)[:200])
            continue
        took[name] += 1
        if isinstance(made, Message) and took[name] % COMPOSE_EVERY == 1:
            compose(Outbound("a@b.test", "c@d.test", made, f"<{i}@b.test>", now))
            composed += 1
    assert sum(took.values()) + sum(refused.values()) == N
    for name in names:  # each option both took and refused values: the inputs reached it
        assert took[name] > 0 and refused[name] > 0, (name, took[name], refused[name])
    assert composed > 0
