"""The pure checks: every refusal before I/O is reachable, header injection is refused."""

from __future__ import annotations

from typing import Any

import pytest

from envelopay.enforcer.send.model import Agent, Disposition, Policy, SendRequest
from envelopay.enforcer.send.policy import allowlisted, check_request, check_sender

BASE: dict[str, Any] = {"to": "bob@example.com", "from": "a1@agents.test", "subject": "hi", "text": "hello"}


def refused(**changes: Any) -> str:
    result = check_request({**BASE, **changes})
    assert isinstance(result, Disposition), result
    assert result.status == "blocked"
    return result.reason


def test_a_plain_request_passes_and_ignores_a_forged_agent_id() -> None:
    req = check_request({**BASE, "agent_id": "someone-else", "agent": "x"})
    assert isinstance(req, SendRequest)
    assert req.to == "bob@example.com" and req.sender == "a1@agents.test"


@pytest.mark.parametrize(
    "to",
    [
        "bob@example.com, eve@evil.test",
        "bob@example.com eve@evil.test",
        " bob@example.com",
        "bob@example.com\r\nBcc: eve@evil.test",
        "bob@example.com\n",
        "Bob <bob@example.com>",
        ["bob@example.com", "eve@evil.test"],
        [],
        "",
        None,
        42,
        "no-at-sign",
    ],
)
def test_recipient_shape_refusals(to: Any) -> None:
    assert refused(to=to).startswith("invalid recipient")


def test_a_one_element_recipient_list_is_one_address() -> None:
    req = check_request({**BASE, "to": ["bob@example.com"]})
    assert isinstance(req, SendRequest) and req.to == "bob@example.com"


def test_recipient_is_checked_before_headers() -> None:
    # Both bad: the recipient shape is the first check, so its reason wins.
    assert refused(to="a@b.c,d@e.f", subject="x\r\nBcc: eve@evil.test").startswith("invalid recipient")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("subject", "hi\r\nBcc: eve@evil.test", "invalid header: subject"),
        ("subject", "hi\nX-Evil: 1", "invalid header: subject"),
        ("reply_to", "a@b.test, c@d.test", "invalid header: reply_to must be a single address"),
        ("reply_to", "a@b.test\r\nBcc: c@d.test", "invalid header: reply_to must be a single address"),
        ("in_reply_to", "<x@y>\r\nBcc: eve@evil.test", "invalid header: in_reply_to"),
        ("in_reply_to", "not-a-msgid", "invalid header: in_reply_to"),
        ("references", "<a@b>\r\n<c@d>", "invalid header: references"),
        ("references", ["<a@b>", "<c@d>\nBcc: x@y.z"], "invalid header: references"),
        ("references", 7, "invalid header: references"),
        ("from", "a1@agents.test\r\nBcc: eve@evil.test", "invalid header: from"),
        ("from", None, "invalid header: from"),
    ],
)
def test_header_injection_and_header_shape_refusals(field: str, value: Any, reason: str) -> None:
    assert refused(**{field: value}) == reason


def test_threading_headers_accepted_in_both_forms() -> None:
    req = check_request({**BASE, "in_reply_to": "<a@b.test>", "references": "<a@b.test> <c@d.test>"})
    assert isinstance(req, SendRequest) and req.references == ("<a@b.test>", "<c@d.test>")
    req2 = check_request({**BASE, "references": ["<a@b.test>"], "reply_to": "r@agents.test"})
    assert isinstance(req2, SendRequest) and req2.references == ("<a@b.test>",) and req2.reply_to


@pytest.mark.parametrize("key", ["raw", "mime", "headers", "html", "attachments", "cc", "bcc"])
def test_raw_mime_and_extra_recipients_are_refused(key: str) -> None:
    assert refused(**{key: "Bcc: eve@evil.test\r\n\r\nhi"}).startswith("simple content only")


def test_body_cap() -> None:
    assert check_request({**BASE, "text": "x" * 50_000}).__class__ is SendRequest
    assert refused(text="x" * 50_001).startswith("body too large")
    big = {"type": "which", "body": {"v": "0.1.0", "note": "n", "task": "y" * 9_000}, "text": "z" * 45_000}
    assert refused(**big).startswith("body too large")


def test_protocol_messages_are_validated() -> None:
    ok = check_request({**BASE, "type": "WHICH", "body": {"v": "0.1.0", "note": "what do you sell?"}})
    assert isinstance(ok, SendRequest) and ok.msg_type == "which"
    assert refused(type="bogus", body={"v": "0.1.0"}).startswith("invalid message: unknown type")
    assert refused(type="pay", body={"v": "0.1.0", "id": "p1"}).startswith("invalid message:")
    assert refused(type="which", body="not an object").startswith("invalid message")
    mismatch = refused(type="which", body={"type": "pay", "v": "0.1.0"})
    assert mismatch == "invalid message: body type does not match type"
    assert refused(subject=None).startswith("invalid message: a subject")


def agent(address: str = "A1@Agents.Test", allow: tuple[str, ...] = ()) -> Agent:
    return Agent(id="i", name="a1", address=address, status="ACTIVE", policy=Policy(allow=allow))


def test_sender_pin_is_case_insensitive_and_fails_closed() -> None:
    req = check_request(BASE)
    assert isinstance(req, SendRequest)
    assert check_sender(req, agent()) is None
    spoof = check_sender(req, agent("boss@agents.test"))
    assert spoof is not None and spoof.status == "blocked"
    assert spoof.reason == "from must be the agent's own address"
    unset = check_sender(req, agent(""))
    assert unset is not None and unset.status == "blocked"


def test_allowlist_exact_addresses_and_domains() -> None:
    allow = ("bob@example.com", "partner.test", "@other.test")
    assert allowlisted("Bob@Example.com", allow)
    assert not allowlisted("alice@example.com", allow)
    assert allowlisted("anyone@partner.test", allow)
    assert allowlisted("x@OTHER.test", allow)
    assert not allowlisted("x@sub.partner.test", allow)
    assert not allowlisted("x@evilpartner.test", allow)
    assert not allowlisted("bob@example.com", ())


def test_default_policy_summary() -> None:
    assert Policy().summary() == "20/hr · 100/day · 0 allowlisted"
    assert Policy(allow=("a.test", "b.test", "c@d.test")).summary() == "20/hr · 100/day · 3 allowlisted"


def test_plain_mail_composition_round_trips_through_the_stdlib_parser() -> None:
    import email
    from datetime import UTC, datetime
    from email import policy as email_policy

    from envelopay.enforcer.send.mime import compose_request

    text = "line one\nzweite Zeile: äöü\n" + "y" * 1200
    req = check_request({**BASE, "subject": "Grüße, café", "text": text,
                         "references": ["<a@b.test>", "<c@d.test>"], "in_reply_to": "<c@d.test>"})
    assert isinstance(req, SendRequest)
    raw = compose_request(req, message_id="<m1@agents.test>", date=datetime(2027, 1, 15, tzinfo=UTC),
                          agent_name="a1")
    assert b"\r\n\r\n" in raw and all(b < 128 for b in raw)
    msg = email.message_from_bytes(raw, policy=email_policy.default)
    assert msg.defects == [] and msg["Subject"] == "Grüße, café"
    assert msg["References"].split() == ["<a@b.test>", "<c@d.test>"]
    # The parser keeps the wire CRLF line ends inside the decoded text.
    assert msg.get_content().replace("\r\n", "\n") == text + "\n"
    plain = check_request(BASE)
    assert isinstance(plain, SendRequest)
    raw2 = compose_request(plain, message_id="<m2@agents.test>", date=datetime(2027, 1, 15, tzinfo=UTC),
                           agent_name="a1")
    assert b"Content-Transfer-Encoding: 7bit" in raw2 and raw2.endswith(b"\r\n\r\nhello\r\n")
