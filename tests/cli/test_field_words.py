"""Refusals of loose fields speak the project's words and name the flag the user typed
(issue 15: no pydantic wording, errors name their field)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.buyer import build
from envelopay.errors import UsageError
from envelopay.protocol.messages import Offer


def test_compose_says_what_is_missing_in_plain_words() -> None:
    done = CliRunner().invoke(app, ["compose", "pay", "--from", "a@x.test", "--to", "b@y.test",
                                    "--amount", "5", "--id", "p1"])
    assert done.exit_code == 2
    text = done.output
    for field in ("token", "chain", "proof"):
        assert f"{field}: is required" in text
    assert "Field required" not in text and "Value error" not in text


def test_an_offer_leg_names_its_flag() -> None:
    leg = {"amount": "12x", "token": "USDC", "chain": "solana-local", "to": "W" * 32, "proof": {"tx": "s"}}
    want = {"amount": "5", "token": "USDC", "chain": "base-local", "to": "0x" + "11" * 20}
    with pytest.raises(UsageError) as exc:
        build(Offer, id="off_1", give=leg, want=want)
    assert str(exc.value).startswith("--give-amount: ")
    assert "Value error" not in str(exc.value)
