"""The MIME walk's fast path (parse._collect): parts that cannot be or hold a JSON part
are read only when no JSON part wins, and the text fallback keeps document order."""

from __future__ import annotations

import json

from envelopay.protocol import parse

PAY = {
    "v": "0.1.0",
    "type": "pay",
    "id": "pay_1",
    "amount": "5",
    "token": "T",
    "chain": "c",
    "proof": {"tx": "x"},
}
OTHER = dict(PAY, id="pay_other")


def mail(body_lines: list[str], boundary: str = "B") -> bytes:
    head = [
        "From: a@x.test", "To: b@y.test", "Subject: PAY | t", "Message-ID: <1@x.test>", "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{boundary}"', "",
    ]  # fmt: skip
    return "\r\n".join(head + body_lines).encode()


def leaf(ctype: str, text: str, *extra: str) -> list[str]:
    return [f"Content-Type: {ctype}", *extra, "", text]


def test_text_order_holds_between_read_and_deferred_parts() -> None:
    named = leaf('text/plain; name="notes.json"', "no object here", "Content-Disposition: inline")
    plain = leaf("text/plain", json.dumps(PAY))
    p = parse(mail(["--B", *named, "--B", *plain, "--B--"]))
    assert p.valid and p.body == PAY
    q = parse(
        mail(
            [
                "--B",
                *leaf("text/plain", json.dumps(PAY)),
                "--B",
                *leaf('text/plain; name="a.json"', json.dumps(OTHER)),
                "--B--",
            ]
        )
    )
    assert q.valid and q.body == PAY  # the first text part in document order


def test_a_json_part_inside_an_alternative_is_found_and_counted() -> None:
    alt = ['Content-Type: multipart/alternative; boundary="A"', "", "--A", *leaf("text/plain", "hello")]
    alt += ["--A", *leaf("application/json", json.dumps(PAY)), "--A--"]
    p = parse(mail(["--B", *alt, "--B--"]))
    assert p.valid and p.body == PAY
    two = parse(mail(["--B", *alt, "--B", *leaf("application/json", json.dumps(OTHER)), "--B--"]))
    assert two.oops is not None and two.oops.value == "invalid_json"


def test_text_deep_in_containers_without_json_is_still_read() -> None:
    text = "PAY below:\r\n" + json.dumps(PAY)
    inner = ['Content-Type: multipart/related; boundary="C"', "", "--C", *leaf("text/plain", text), "--C--"]
    alt = [
        'Content-Type: multipart/alternative; boundary="A"',
        "",
        "--A",
        *inner,
        "--A",
        *leaf("text/html", "<p>x</p>"),
        "--A--",
    ]
    p = parse(
        mail(["--B", *alt, "--B", *leaf("image/png", "xx", "Content-Disposition: attachment"), "--B--"])
    )
    assert p.valid and p.body == PAY
    attached = parse(
        mail(["--B", *leaf("text/plain", json.dumps(PAY), "Content-Disposition: attachment"), "--B--"])
    )
    assert not attached.valid and attached.body is None  # an attached text file is not the body


def test_a_forward_deferred_is_never_read() -> None:
    fwd = [
        "Content-Type: message/rfc822",
        "",
        "Subject: PAY",
        "Content-Type: text/plain",
        "",
        json.dumps(PAY),
    ]
    p = parse(mail(["--B", *fwd, "--B", *leaf("text/plain", "see the forward"), "--B--"]))
    assert not p.valid and p.body is None and p.oops is not None and p.oops.value == "missing_field"
