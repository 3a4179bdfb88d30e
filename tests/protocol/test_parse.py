"""parse(): placement, validation, precedence and header hygiene on hand-built messages."""

from __future__ import annotations

import json
from typing import Any

import pytest

from envelopay.protocol import MessageType, OopsCode, Order, ParseOptions, Pay, Which, parse

PAY: dict[str, Any] = {
    "v": "0.1.0", "type": "pay", "id": "pay_1", "amount": "30000000", "token": "USDC", "chain": "base",
    "proof": {"tx": "0xabc"},
}  # fmt: skip


def mail(subject: str | None, body: str = "", *, headers: str = "", ctype: str = "text/plain") -> bytes:
    head = "From: alice@a.test\r\nTo: bob@b.test\r\nMessage-ID: <m1@a.test>\r\n"
    if subject is not None:
        head += f"Subject: {subject}\r\n"
    head += headers + f"Content-Type: {ctype}\r\n"
    return (head + "\r\n" + body).encode("utf-8")


def test_valid_pay_in_plain_text() -> None:
    p = parse(mail("PAY | Dinner", json.dumps(PAY)))
    assert p.protocol and p.valid and p.oops is None and p.type is MessageType.PAY
    assert isinstance(p.message, Pay) and p.message.amount == 30_000_000
    assert p.note == "Dinner" and p.id == "pay_1" and p.from_addr == "alice@a.test"
    assert p.message_id == "<m1@a.test>" and p.to_addrs == ("bob@b.test",)
    assert p.body == PAY


def test_bare_which_is_valid_and_has_a_default_model() -> None:
    p = parse(mail("WHICH"))
    assert p.valid and p.message == Which() and p.body is None


@pytest.mark.parametrize("kind", ["PAY", "ORDER", "METHODS", "FULFILL", "INVOICE", "OFFER", "ACCEPT"])
def test_required_fields_and_no_body_is_missing_field(kind: str) -> None:
    p = parse(mail(kind, "Just prose."))
    assert not p.valid and p.oops is OopsCode.MISSING_FIELD


def test_oops_without_body_is_invalid_but_answers_nothing() -> None:
    p = parse(mail("OOPS | broken"))
    assert p.protocol and not p.valid and p.oops is None and p.problems


def test_unknown_type_lists_the_nine() -> None:
    p = parse(mail("REFUND | please"))
    assert p.protocol and p.type is None and p.oops is OopsCode.UNKNOWN_TYPE
    assert "WHICH, METHODS, PAY, ORDER, FULFILL, INVOICE, OFFER, ACCEPT, OOPS" in p.problems[0].detail


def test_re_prefix_option() -> None:
    raw = mail("Re: PAY | x", json.dumps(PAY))
    assert not parse(raw).protocol
    assert parse(raw, options=ParseOptions(re_prefix="v0.2")).valid


def test_quoted_lines_and_signature_are_removed() -> None:
    other = {**PAY, "id": "quoted"}
    body = f"> {json.dumps(other)}\r\n{json.dumps(PAY)}\r\n-- \r\n{json.dumps({**PAY, 'id': 'sig'})}\r\n"
    p = parse(mail("PAY", body))
    assert p.valid and p.id == "pay_1"


def test_prose_braces_are_prose() -> None:
    p = parse(mail("PAY", 'Sets {a} and {} and {"x": 1}:\r\n' + json.dumps(PAY) + "\r\nbye {"))
    assert p.valid and p.body == PAY


def test_two_payload_objects_are_invalid_json() -> None:
    p = parse(mail("PAY", json.dumps(PAY) + "\r\n" + json.dumps(PAY)))
    assert p.oops is OopsCode.INVALID_JSON


def test_html_is_stripped() -> None:
    html = "<html><body><p>Hi</p><pre>" + json.dumps(PAY).replace('"', "&quot;") + "</pre></body></html>"
    p = parse(mail("PAY", html, ctype="text/html"))
    assert p.valid and p.body == PAY


def test_never_descends_into_message_rfc822() -> None:
    body = (
        "--b\r\nContent-Type: message/rfc822\r\n\r\nSubject: PAY\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps(PAY)
        + "\r\n--b--\r\n"
    )
    p = parse(mail("PAY", body, ctype='multipart/mixed; boundary="b"'))
    assert p.oops is OopsCode.MISSING_FIELD and p.body is None


def test_json_part_preferred_over_text() -> None:
    body = (
        "--b\r\nContent-Type: text/plain\r\n\r\n"
        + json.dumps({**PAY, "id": "text"})
        + "\r\n--b\r\nContent-Type: application/json\r\n\r\n"
        + json.dumps(PAY)
        + "\r\n--b--\r\n"
    )
    p = parse(mail("PAY", body, ctype="multipart/mixed; boundary=b"))
    assert p.valid and p.id == "pay_1"


@pytest.mark.parametrize("amount", [30000000, "-1", "+1", "1.0", "", "1e3", True, None, 1.5, "１２"])
def test_amount_must_be_a_digit_string(amount: object) -> None:
    p = parse(mail("PAY", json.dumps({**PAY, "amount": amount})))
    assert p.oops is OopsCode.INVALID_FIELD and p.problems[0].field == "amount"


def test_missing_wallet_codes() -> None:
    invoice = {"v": "0.1.0", "type": "invoice", "id": "i", "amount": "1", "token": "SOL", "chain": "solana"}
    assert parse(mail("INVOICE", json.dumps(invoice))).oops is OopsCode.MISSING_WALLET
    methods = {"v": "0.1.0", "type": "methods", "rails": [{"chain": "solana", "token": "SOL", "price": "1"}]}
    p = parse(mail("METHODS", json.dumps(methods)))
    assert p.oops is OopsCode.MISSING_WALLET and p.problems[0].field == "rails[0].wallet"


def test_precedence_within_fields() -> None:
    body = {k: v for k, v in PAY.items() if k != "chain"} | {"amount": 5}
    p = parse(mail("PAY", json.dumps(body)))
    assert p.oops is OopsCode.MISSING_FIELD
    assert [x.code for x in p.problems] == [OopsCode.MISSING_FIELD, OopsCode.INVALID_FIELD]


def test_stage_precedence_version_before_fields() -> None:
    p = parse(mail("PAY", json.dumps({"v": "9.0.0", "type": "pay"})))
    assert p.oops is OopsCode.UNSUPPORTED_VERSION and len(p.problems) == 1


def test_type_mismatch_and_subject_governs() -> None:
    ok = parse(mail("PAY", json.dumps({**PAY, "type": "invoice"})))
    assert ok.valid and isinstance(ok.message, Pay) and ok.warnings
    bad = parse(mail("ORDER", json.dumps(PAY)))
    assert bad.oops is OopsCode.TYPE_MISMATCH


def test_prepaid_order_rules() -> None:
    base = {"v": "0.2.0", "type": "order", "id": "o", "task": "t", "amount": "5", "token": "SOL",
            "chain": "solana", "proof": {"tx": "1"}}  # fmt: skip
    p = parse(mail("ORDER", json.dumps(base)))
    assert p.valid and isinstance(p.message, Order) and p.message.prepaid
    v01 = parse(mail("ORDER", json.dumps({**base, "v": "0.1.0"})))
    assert v01.valid and isinstance(v01.message, Order) and not v01.message.prepaid and v01.warnings
    assert v01.body is not None and v01.body["amount"] == "5"  # kept for audit
    partial = parse(mail("ORDER", json.dumps({k: v for k, v in base.items() if k != "chain"})))
    assert partial.oops is OopsCode.MISSING_FIELD and partial.problems[0].field == "chain"


@pytest.mark.parametrize(
    "extra",
    [
        "Subject: PAY | again\r\n",
        "From: mallory@e.test\r\n",
        "Message-ID: <x@e.test>\r\n",
        "subject: PAY\r\n",
    ],
)
def test_duplicate_singleton_headers_are_invalid_field(extra: str) -> None:
    p = parse(mail("PAY", json.dumps(PAY), headers=extra))
    assert p.protocol and not p.valid and p.oops is OopsCode.INVALID_FIELD
    assert "duplicate" in p.problems[0].detail


def test_crlf_in_decoded_subject_is_refused() -> None:
    p = parse(mail("=?utf-8?q?PAY_=7C_x=0D=0ABcc:_v@e.test?=", json.dumps(PAY)))
    assert p.protocol and p.oops is OopsCode.INVALID_FIELD and p.problems[0].field == "subject"
    assert p.subject is not None and "\n" not in p.subject


def test_invalid_oops_never_gets_an_oops() -> None:
    p = parse(mail("OOPS", json.dumps({"v": "0.1.0", "type": "oops"}), headers="From: x@y.test\r\n"))
    assert not p.valid and p.oops is None and p.problems


def test_threading_headers() -> None:
    p = parse(mail("FULFILL", headers="In-Reply-To: <a@x>\r\nReferences: <r@x>\r\n <a@x>\r\n"))
    assert p.in_reply_to == "<a@x>" and p.references == ("<r@x>", "<a@x>")


def test_oversized_message_is_refused() -> None:
    raw = mail("PAY", json.dumps(PAY) + " " * 2000)
    p = parse(raw, options=ParseOptions(max_bytes=1000))
    assert p.oops is OopsCode.INVALID_FIELD and "larger" in p.problems[0].detail


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\r\n",
        b"\xff\xfe\x00",
        b"Subject: PAY\r\n\r\n" + b"{" * 50_000,
        b"Subject: PAY\r\n\r\n" + b"[" * 100_000,
        b'Subject: PAY\r\n\r\n{"v": ' + b"1" * 6000 + b"}",
        b"Subject: PAY\r\nContent-Type: multipart/mixed; boundary=x\r\n\r\n" + b"--x\r\n" * 5000,
        b"Subject: PAY\r\nContent-Transfer-Encoding: base64\r\n\r\n====a",
        b"Subject: PAY\r\n\r\n" + (b'{"a":[' + b"1," * 4000) * 250,
        b"Subject: PAY\r\nX-Long: a\r\n" + b" b\r\n" * 200_000 + b"\r\n{}",
        b"Subject: PAY\r\nContent-Type: text/html\r\n\r\n"
        + b"<blockquote>" * 50_000
        + b"</blockquote>" * 50_000,
        b"Subject: PAY\r\nContent-Type: text/html\r\n\r\n" + b"<" * 500_000 + b"<br" * 300_000,
        b"Subject: PAY\r\nContent-Type: text/html\r\n\r\n" + b"<script>" * 200_000,
        b"Subject: " + b"=?utf-8?q?PAY?= " * 20_000 + b"\r\n\r\n{}",
        b"Subject: PAY\r\nFrom: " + b"(" * 3000 + b"\r\n\r\n{}",
        b"Subject: PAY\r\nFrom: " + b"(" * 50_000 + b"\r\n\r\n{}",
        b"Subject: PAY\r\nFrom: " + b"a@b," * 50_000 + b"\r\n\r\n{}",
    ],
)
def test_hostile_inputs_give_values(raw: bytes) -> None:
    # (Each of these took seconds to minutes with a quadratic step; now linear.)
    p = parse(raw)
    assert "parser_error" not in p.warnings
    assert not p.valid


@pytest.mark.parametrize("charset", ["hex", "rot13", "zlib", "uu", "idna", "x-unknown", "utf-16"])
def test_odd_charsets_never_break_the_parser(charset: str) -> None:
    p = parse(mail("PAY", json.dumps(PAY), ctype=f"text/plain; charset={charset}"))
    assert "parser_error" not in p.warnings and p.protocol
    if charset in ("hex", "rot13", "zlib", "uu", "x-unknown"):
        assert p.valid  # not a text encoding, or unknown: read as UTF-8


def test_type_case_slip_is_not_a_mismatch() -> None:
    body = {k: v for k, v in PAY.items() if k != "amount"} | {"type": "PAY"}
    p = parse(mail("PAY", json.dumps(body)))
    assert p.oops is OopsCode.MISSING_FIELD and p.problems[0].field == "amount"
    assert parse(mail("PAY", json.dumps({**PAY, "type": "Pay"}))).warnings  # valid, with a warning
