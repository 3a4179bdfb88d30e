"""Strict single-address validation (envelopay.mail.addresses), used before any mail I/O."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopay.errors import UsageError
from envelopay.mail.addresses import (
    Address,
    AddressProblem,
    domain_of,
    is_valid_address,
    parse_address,
    require_address,
)


@pytest.mark.parametrize(
    ("value", "addr"),
    [
        ("agent@example.com", "agent@example.com"),
        ("Agent.Smith+tag@Example.COM", "Agent.Smith+tag@example.com"),
        ("a@localhost", "a@localhost"),
        ("o'brien_1@mail.sub-domain.example.org", "o'brien_1@mail.sub-domain.example.org"),
    ],
)
def test_accepts_one_bare_address(value: str, addr: str) -> None:
    parsed = parse_address(value)
    assert isinstance(parsed, Address) and parsed.addr == addr
    assert require_address(value) == addr and is_valid_address(value)
    assert domain_of(addr) == addr.split("@")[1]


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        ("a@example.com\r\nBcc: victim@example.org", "control_char"),
        ("a@example.com\n", "control_char"),
        ("a@exam\x00ple.com", "control_char"),
        ("a@example.com, b@example.com", "several"),
        ("a@example.com;b@example.com", "several"),
        ("group: a@example.com;", "several"),
        ("a@b@example.com", "several"),
        (" a@example.com", "whitespace"),
        ("a@example.com ", "whitespace"),
        ("a b@example.com", "whitespace"),
        ("a@example .com", "whitespace"),
        ('"quoted"@example.com', "syntax"),
        ("a@[192.0.2.1]", "syntax"),
        ("a@example.com.", "syntax"),
        ("a..b@example.com", "syntax"),
        ("@example.com", "syntax"),
        ("a@", "syntax"),
        ("a@-bad.example", "syntax"),
        ("ü@example.com", "non_ascii"),
        ("x" * 65 + "@example.com", "too_long"),
        ("Name <a@example.com>", "syntax"),
    ],
)
def test_refuses_everything_but_one_address(value: str, reason: str) -> None:
    parsed = parse_address(value)
    assert isinstance(parsed, AddressProblem) and parsed.reason == reason, parsed
    with pytest.raises(UsageError, match="recipient"):
        require_address(value, field="recipient")


@pytest.mark.parametrize(
    ("value", "addr", "name"),
    [
        ("Alice <alice@example.com>", "alice@example.com", "Alice"),
        ('"Smith, Alice" <alice@example.com>', "alice@example.com", "Smith, Alice"),
        ("<alice@example.com>", "alice@example.com", None),
    ],
)
def test_display_name_form_when_allowed(value: str, addr: str, name: str | None) -> None:
    parsed = parse_address(value, allow_display_name=True)
    assert isinstance(parsed, Address) and (parsed.addr, parsed.display_name) == (addr, name)


@pytest.mark.parametrize(
    "value",
    [
        "Alice <a@example.com>, Bob <b@example.com>",
        "Alice <a@example.com> <b@example.com>",
        "a@example.com <b@example.com>",
        "Alice<a@example.com>",
        "Alice <a@example.com> trailing",
        '"Ali"ce" <a@example.com>',
    ],
)
def test_display_name_form_still_holds_one_address(value: str) -> None:
    assert isinstance(parse_address(value, allow_display_name=True), AddressProblem)


@settings(deadline=None)
@given(st.text(max_size=80))
def test_any_text_gives_an_address_or_a_problem(value: str) -> None:
    parsed = parse_address(value, allow_display_name=True)
    assert isinstance(parsed, Address | AddressProblem)
    if isinstance(parsed, Address):
        assert not any(c in parsed.addr for c in '\r\n\t ,;<>"')
        assert parsed.addr.count("@") == 1
