"""`order --pay`: an INVOICE above --max-amount is refused before anything is paid, and a
malformed --max-amount is a usage error (exit 2) before anything is sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from envelopay.client.buyer import Answer
from envelopay.client.commands import pay_the_invoice
from envelopay.engine import Outcome
from envelopay.errors import UsageError
from envelopay.protocol.messages import Fulfill, Invoice


class NoNode:
    """Any use of the node would mean money moved or mail went out."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the node was used ({name})")


async def test_an_invoice_above_the_cap_is_not_paid() -> None:
    invoice = Invoice(id="inv_1", amount=300, token="USDC", chain="solana-local", wallet="W" * 32,
                      order_ref="ord_1")
    answer = Answer(invoice, Outcome("processed", "<m@x>", flow_id="flow_1", state="invoiced"))
    with pytest.raises(UsageError, match="more than 250; nothing was paid"):
        await pay_the_invoice("worker@garden.local", 250)(NoNode(), answer)  # type: ignore[arg-type]
    free = Answer(Fulfill(id="ful_1", order_ref="ord_1", result={}), Outcome("processed", "<n@x>", "flow_1"))
    assert await pay_the_invoice("worker@garden.local", 250)(NoNode(), free) is None  # type: ignore[arg-type]


def test_malformed_max_amount_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "envelopay.cli", "order", "worker@garden.local", "--task",
                           '{"name":"word_count","text":"x"}', "--pay", "--max-amount", "1.5",
                           "-c", str(tmp_path / "none.toml")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--max-amount" in done.stderr
