"""What `worker serve` says on stderr: one line per message handled, and a summary at
stop (counts by outcome, OOPS by code, money received per rail).

Text lines are `key=value` pairs, one message each, grep-able and safe: a value with a
space, quote, `=` or control character is written as a JSON string, so nothing a sender
puts in its From can start a line of its own. `--log-format json` writes the same as
one JSON object per line (`"event": "message"`, and `"event": "summary"` at stop).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

from envelopay.ledger.store import RefundLine
from envelopay.node.observe import Handled, Received
from envelopay.rails.amounts import Decimals, amount_text, human_amount, no_decimals

__all__ = ["LogFormat", "ServeLog"]

LogFormat = Literal["text", "json"]

_BARE = re.compile(r"[A-Za-z0-9_.@<>/:+-]+")


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _value(text: str) -> str:
    return text if _BARE.fullmatch(text) else json.dumps(text)


class ServeLog:
    """Writes each Handled as a line and keeps the tallies the summary reports."""

    def __init__(
        self,
        write: Callable[[str], Any],
        fmt: LogFormat = "text",
        decimals: Decimals = no_decimals,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.write = write
        self.fmt: LogFormat = fmt
        self.decimals = decimals
        self.clock = clock
        self.started = clock()
        self.outcomes: Counter[str] = Counter()
        self.oops: Counter[str] = Counter()
        self.received: Counter[tuple[str, str]] = Counter()  # (chain, token) -> smallest units

    def __call__(self, handled: Handled) -> None:
        outcome = handled.outcome
        self.outcomes[outcome.status] += 1
        if outcome.oops is not None:
            self.oops[outcome.oops.value] += 1
        if handled.received is not None:
            got = handled.received
            self.received[(got.chain, got.token)] += got.amount
        self.write(self.line(handled))

    # -- one message ----------------------------------------------------------------------

    def line(self, handled: Handled) -> str:
        doc = self.message_json(handled)
        if self.fmt == "json":
            return json.dumps(doc, separators=(",", ":"))
        parts = [doc["at"], f"type={doc['type'] or '-'}", f"from={_value(doc['from'] or '-')}",
                 f"flow={_value(doc['flow'] or '-')}", f"outcome={doc['outcome']}"]
        if doc["oops"]:
            parts.append(f"oops={doc['oops']}")
        if doc["repeat"]:
            parts.append(f"repeat={doc['repeat']}")
        if doc.get("unanswered"):  # RFC 3834 or a limit held the answer (SPEC "Automatic answers")
            parts.append(f"unanswered={doc['unanswered']}")
        if doc.get("why"):
            parts.append(f"why={_value(doc['why'])}")
        if doc["received"]:
            got = doc["received"]
            parts.append(f"received={_value(self._money(got['amount'], got['token'], got['chain']))}")
        parts.append(f"ms={doc['ms']}")
        return " ".join(parts)

    def message_json(self, handled: Handled) -> dict[str, Any]:
        outcome = handled.outcome
        got = handled.received
        return {
            "event": "message",
            "at": _stamp(handled.at),
            "type": handled.type.upper() if handled.type else None,
            "from": handled.sender,
            "flow": outcome.flow_id,
            "outcome": outcome.status,
            "oops": outcome.oops.value if outcome.oops is not None else None,
            "repeat": outcome.repeat,
            "message_id": outcome.message_id,
            "received": self._received_json(got) if got is not None else None,
            "ms": round(handled.seconds * 1000, 1),
            # Only when there is one: why the answer was held, why the mail was quarantined.
            **({"unanswered": outcome.unanswered} if outcome.unanswered else {}),
            **({"why": outcome.detail} if outcome.status == "quarantined" else {}),
        }

    # -- at stop --------------------------------------------------------------------------

    def summary(self, refunded: Sequence[RefundLine] = ()) -> str:
        """What this serve did, at stop; `refunded`: the refunds paid meanwhile (read from
        the ledger: a job's runner and the engine pay them, not a message's handling)."""
        doc = self.summary_json(refunded)
        if self.fmt == "json":
            return json.dumps(doc, separators=(",", ":"))
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.outcomes.items())) or "none"
        lines = [f"summary: {doc['messages']} message(s) in {doc['seconds']:g} s: {counts}"]
        if self.oops:
            lines.append("  oops: " + ", ".join(f"{code} {n}" for code, n in sorted(self.oops.items())))
        if not self.received:
            lines.append("  received: nothing")
        for got in doc["received"]:
            lines.append("  received: " + self._money(got["amount"], got["token"], got["chain"]))
        for back in doc["refunded"]:
            lines.append("  refunded: " + self._money(back["amount"], back["token"], back["chain"])
                         + f", {back['refunds']} refund(s)")
        return "\n".join(lines)

    def summary_json(self, refunded: Sequence[RefundLine] = ()) -> dict[str, Any]:
        now = self.clock()
        back: Counter[tuple[str, str]] = Counter()
        count: Counter[tuple[str, str]] = Counter()
        for r in refunded:
            back[(r.chain, r.token)] += r.amount
            count[(r.chain, r.token)] += 1
        return {
            "event": "summary",
            "started": _stamp(self.started),
            "stopped": _stamp(now),
            "seconds": round((now - self.started).total_seconds(), 1),
            "messages": sum(self.outcomes.values()),
            "outcomes": dict(sorted(self.outcomes.items())),
            "oops": dict(sorted(self.oops.items())),
            "received": [self._received_json(Received(chain, token, amount))
                         for (chain, token), amount in sorted(self.received.items())],
            "refunded": [{**self._received_json(Received(c, t, n)), "refunds": count[(c, t)]}
                         for (c, t), n in sorted(back.items())],
        }

    def _received_json(self, got: Received) -> dict[str, Any]:
        places = self.decimals(got.chain, got.token)
        return {
            "chain": got.chain,
            "token": got.token,
            "amount": str(got.amount),  # smallest units, a string as in the protocol's JSON
            "decimals": places,
            "human": human_amount(got.amount, places) if places is not None else None,
        }

    def _money(self, amount: str, token: str, chain: str) -> str:
        """`0.25 USDC on solana-local (250000 units)`; the units alone, said so, when the
        asset's decimals are unknown here."""
        places = self.decimals(chain, token)
        text = f"{amount_text(int(amount), token, places)} on {chain}"
        return text if places is None else f"{text} ({amount} units)"
