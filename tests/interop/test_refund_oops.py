"""The refund rides in an OOPS's `error` object as an extension (SPEC.md "Refunds"): a
strict reader — our own strict parser, and the protocol author's implementation as
fixtures/interop/kimjune01 describes it — still reads the OOPS, its code and note, and
ignores what it does not know."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.interop import _kimjune01 as them

from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Oops, OopsError
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parse import parse

REFUND = {"chain": "solana-local", "token": "USDC", "amount": "250000", "wallet": "BuyerWallet111",
          "proof": {"tx": "5abc"}, "status": "paid", "reason": "task_failed"}


def _raw() -> bytes:
    oops = Oops(id="oops_1", note="task_failed: the reviewer broke; refunded", ref="pay_1",
                error=OopsError(code="task_failed", refund=REFUND))
    return compose(Outbound("worker@garden.local", "buyer@agentmail.test", oops, "<r1@garden.local>",
                            datetime(2026, 1, 1, tzinfo=UTC)))


def test_a_strict_parser_reads_the_oops_and_keeps_the_refund_as_an_unknown_field() -> None:
    parsed = parse(_raw())
    assert not parsed.problems
    message = parsed.message
    assert isinstance(message, Oops) and message.error is not None and message.error.code == "task_failed"
    assert (message.error.model_extra or {})["refund"] == REFUND


def test_the_authors_implementation_routes_and_reads_it_as_an_oops() -> None:
    kind, body = them.read_reply(_raw())
    assert kind == "OOPS"
    assert body["type"] == "oops" and body["error"]["code"] == "task_failed" and body["ref"] == "pay_1"
