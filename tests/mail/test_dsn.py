"""Recognising bounces (RFC 3464 / RFC 6522 DSNs): a real Postfix DSN, a headers-only
report with a delayed recipient, and things that only look like one."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from envelopay.mail.dsn import parse_dsn

VECTORS = Path(__file__).resolve().parents[2] / "fixtures" / "dsn"


def test_postfix_bounce_names_the_returned_message_and_status() -> None:
    dsn = parse_dsn((VECTORS / "postfix-550-5.1.1.eml").read_bytes())
    assert dsn is not None
    assert dsn.reporting_mta == "mx.envelopay.test"
    assert dsn.message_id == "<20261201100017.94EC720C1B2@mx.envelopay.test>"
    assert dsn.original_message_id == "<out.1@worker.test>"
    [r] = dsn.failed
    assert (r.final_recipient, r.status, r.action) == ("buyer@far.test", "5.1.1", "failed")
    assert r.diagnostic is not None and r.diagnostic.startswith("smtp; 550 5.1.1")
    assert "User unknown" in r.diagnostic  # the folded line is joined


def test_headers_only_report_with_a_delayed_recipient() -> None:
    dsn = parse_dsn((VECTORS / "headers-only-delayed.eml").read_bytes())
    assert dsn is not None
    assert dsn.envelope_id == "out.2@worker.test"
    assert dsn.original_message_id == "<out.2@worker.test>"
    assert [(r.final_recipient, r.action, r.status) for r in dsn.recipients] == [
        ("gone@far.test", "failed", "5.2.1"),
        ("slow@far.test", "delayed", "4.4.7"),
    ]
    assert [r.final_recipient for r in dsn.failed] == ["gone@far.test"]  # delayed is not a bounce
    assert dsn.failed[0].diagnostic == "smtp; 550 5.2.1 mailbox disabled"


def test_not_a_dsn() -> None:
    plain = b"From: a@x.test\r\nTo: b@y.test\r\nSubject: hi\r\n\r\n{\"type\":\"which\"}\r\n"
    assert parse_dsn(plain) is None
    # A report of another kind (RFC 8098 disposition notification) is not a bounce.
    mdn = (VECTORS / "postfix-550-5.1.1.eml").read_bytes().replace(
        b"report-type=delivery-status", b"report-type=disposition-notification"
    )
    assert parse_dsn(mdn) is None
    # A delivery-status part without a single well-formed recipient group says nothing.
    hollow = (VECTORS / "headers-only-delayed.eml").read_bytes().replace(b"Status: ", b"Stat: ")
    assert parse_dsn(hollow) is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_give_a_value(raw: bytes) -> None:
    prefix = b"Content-Type: multipart/report; report-type=delivery-status; boundary=b\r\n\r\n--b\r\n"
    for candidate in (raw, prefix + raw):
        dsn = parse_dsn(candidate)
        assert dsn is None or len(dsn.recipients) >= 1
