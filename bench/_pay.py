"""The ~1 KB PAY the parse benchmarks time (parse.py, parse_ab.py), as the compose() of
the given `envelopay.protocol` module writes it: parse_ab loads two trees' modules."""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType


def pay_message(protocol: ModuleType) -> bytes:
    pay = protocol.Pay(
        id="pay_5e6f",
        amount=30_000_000,
        token="USDC",
        chain="base",
        proof={"tx": "0x7a3f" + "0" * 58},
        invoice_ref="inv_9mN3",
        note="Dinner - my half",
    )
    when = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    outbound = protocol.Outbound("alice@agents.test", "bob@worker.test", pay, "<pay.1@agents.test>", when)
    raw: bytes = protocol.compose(outbound)
    return raw
