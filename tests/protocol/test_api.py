"""envelopay.protocol's public helpers, and the light top level (its pinned names:
tests/test_public_api.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from envelopay.protocol import (
    HeaderValueError,
    MessageType,
    OopsCode,
    Outbound,
    Pay,
    Which,
    compose,
    compose_message,
    make_oops,
    parse,
    reply_headers,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_importing_envelopay_loads_no_io_or_chain_library() -> None:
    # A fresh interpreter: the top level must stay light (see envelopay/__init__.py).
    import subprocess
    import sys

    code = (
        "import sys, envelopay; "
        "bad = [m for m in ('sqlite3', 'psycopg', 'aiosmtplib', 'aioimaplib', 'aiosmtpd', "
        "'solders', 'solana', 'web3', 'dkim', 'httpx') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_make_oops_carries_code_detail_and_ref() -> None:
    oops = make_oops(OopsCode.UNKNOWN_TYPE, "no such type", ref="x_1", supported=["WHICH"])
    assert oops.error is not None
    assert oops.error.code == "unknown_type"
    assert oops.ref == "x_1"
    assert oops.error.model_dump() == {"code": "unknown_type", "supported": ["WHICH"]}


def test_compose_message_makes_an_id_in_the_domain_and_threads() -> None:
    raw, mid = compose_message(Which(), sender="a@x.test", recipient="b@y.test", domain="x.test", now=NOW)
    assert mid.startswith("<") and mid.endswith("@x.test>")
    first = parse(raw)
    assert first.message_id == mid
    irt, refs = reply_headers(first)
    assert irt == mid and refs == (mid,)
    pay = Pay(id="p1", amount=5, token="SOL", chain="solana", proof={"tx": "abc"})
    raw2, mid2 = compose_message(
        pay,
        sender="b@y.test",
        recipient="a@x.test",
        domain="y.test",
        now=NOW,
        in_reply_to=irt,
        references=refs,
    )
    second = parse(raw2)
    assert second.in_reply_to == mid and second.references == (mid,)
    assert reply_headers(second) == (mid2, (mid, mid2))


@pytest.mark.parametrize(
    "field,value",
    [
        ("sender", "a@x.test\r\nBcc: victim@z.test"),
        ("recipient", "b@y.test\n"),
        ("message_id", "<a@b>\r\nX: y"),
        ("in_reply_to", "<a@b>\rX"),
        ("note", "hello\nBcc: z@z.test"),
    ],
)
def test_compose_refuses_crlf_in_any_header_value(field: str, value: str) -> None:
    kwargs: dict[str, object] = {
        "sender": "a@x.test",
        "recipient": "b@y.test",
        "message": Which(),
        "message_id": "<1@x.test>",
        "date": NOW,
    }
    kwargs[field] = value
    with pytest.raises(HeaderValueError):
        compose(Outbound(**kwargs))  # type: ignore[arg-type]


def test_compose_refuses_crlf_in_references() -> None:
    out = Outbound("a@x.test", "b@y.test", Which(), "<1@x.test>", NOW, references=("<a@b>\r\nX: y",))
    with pytest.raises(HeaderValueError, match="references"):
        compose(out)


def test_compose_is_deterministic() -> None:
    out = Outbound("a@x.test", "b@y.test", Which(note="héllo"), "<1@x.test>", NOW)
    assert compose(out) == compose(out)
    assert parse(compose(out)).type is MessageType.WHICH
