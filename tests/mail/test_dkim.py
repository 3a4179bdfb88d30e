"""DKIM: our signatures verify under dkimpy's own verifier; verification is complete and strict.

Keys are generated at test time. DNS is a table, except for the resolver test, which
runs dnspython against a small real UDP DNS server on loopback."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

import dkim as dkimpy
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopay import dkim
from envelopay.errors import ConfigError, UsageError

RSA = dkim.DkimKey.generate_rsa()
ED = dkim.DkimKey.generate_ed25519()
KEYS = {"rsa": RSA, "ed25519": ED}

MESSAGE = (
    b"From: Alice Agent <alice@example.com>\r\n"
    b"To: worker@example.org\r\n"
    b"Subject: PAY |   thanks\t for  the work \r\n"
    b"Date: Mon, 30 Nov 2026 10:00:00 +0000\r\n"
    b"Message-ID: <pay-1@example.com>\r\n"
    b"References:\r\n <a@example.org>\r\n\t<b@example.org>\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b'{"v": "0.1.0", "id": "p1"}  \r\n'
    b"trailing \t spaces\t\r\n"
    b"\r\n\r\n"
)


def record_table(**by_selector: dkim.DkimKey) -> dict[str, str]:
    return {f"{sel}._domainkey.example.com": k.dns_txt_record() for sel, k in by_selector.items()}


def dkimpy_verifies(signed: bytes, key: dkim.DkimKey, idx: int = 0) -> bool:
    record = key.dns_txt_record().encode()
    return bool(dkimpy.DKIM(signed).verify(idx=idx, dnsfunc=lambda _name, timeout=5: record))


@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
async def test_signature_verifies_under_dkimpy_and_ours(kind: str) -> None:
    key = KEYS[kind]
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=key, timestamp=1_790_000_000)
    assert dkimpy_verifies(signed, key)
    result = await dkim.verify(signed, dns=dkim.table_dns(record_table(s1=key)))
    assert (result.status, result.domain, result.aligned, result.from_domain) == (
        "pass",
        "example.com",
        True,
        "example.com",
    )
    assert result.signatures[0].algorithm == f"{kind}-sha256"


@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
def test_signature_tags(kind: str) -> None:
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=KEYS[kind])
    header = signed.split(b"\r\n\r\n")[0].split(b"\r\nFrom:")[0]
    tags = dict(
        (k.strip(), v.strip())
        for k, _, v in (
            t.partition(b"=") for t in header.split(b":", 1)[1].replace(b"\r\n\t", b"").split(b";")
        )
    )
    assert tags[b"c"] == b"relaxed/relaxed"
    assert b"l" not in tags and b"t" not in tags
    names = tags[b"h"].split(b":")
    for frozen in dkim.FROZEN_HEADERS:
        present = sum(1 for line in MESSAGE.split(b"\r\n") if line.lower().startswith(frozen.encode() + b":"))
        assert names.count(frozen.encode()) == present + 1, frozen
    assert max(len(line) for line in header.split(b"\r\n")) < 100


def test_lf_input_is_signed_as_crlf_and_verifies() -> None:
    lf = MESSAGE.replace(b"\r\n", b"\n")
    signed = dkim.sign(lf, selector="s1", domain="example.com", key=RSA)
    assert b"\n" not in signed.replace(b"\r\n", b"")
    assert signed.endswith(MESSAGE)
    assert dkimpy_verifies(signed, RSA)
    unterminated = dkim.sign(b"From: a@example.com\r\n\r\n ", selector="s1", domain="example.com", key=RSA)
    assert unterminated.endswith(b"\r\n\r\n \r\n")  # what SMTP would transmit anyway
    assert dkimpy_verifies(unterminated, RSA)


@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
async def test_dkimpy_signatures_verify_under_ours(kind: str) -> None:
    if kind == "rsa":
        private = RSA.private_pem()
        alg = b"rsa-sha256"
    else:
        private = ED.ed25519_seed_b64().encode()
        alg = b"ed25519-sha256"
    signed = (
        dkimpy.sign(
            MESSAGE,
            b"s1",
            b"example.com",
            private,
            canonicalize=(b"relaxed", b"relaxed"),
            signature_algorithm=alg,
        )
        + MESSAGE
    )
    result = await dkim.verify(signed, dns=dkim.table_dns(record_table(s1=KEYS[kind])))
    assert result.status == "pass" and result.aligned


@pytest.mark.parametrize("header", dkim.FROZEN_HEADERS)
@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
async def test_adding_any_oversigned_header_breaks_the_signature(kind: str, header: str) -> None:
    key = KEYS[kind]
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=key)
    # Added at the top (just under the signature), where a forger's header would be read first.
    sig_end = signed.index(b"\r\nFrom:") + 2
    tampered = signed[:sig_end] + f"{header}: <forged@evil.test>\r\n".encode() + signed[sig_end:]
    appended_below = signed.replace(b"\r\n\r\n", f"\r\n{header}: forged\r\n\r\n".encode(), 1)
    for variant in (tampered, appended_below):
        assert not dkimpy_verifies(variant, key)
        result = await dkim.verify(variant, dns=dkim.table_dns(record_table(s1=key)))
        assert result.status == "fail"


async def test_body_change_and_appended_text_fail() -> None:
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=RSA)
    table = dkim.table_dns(record_table(s1=RSA))
    changed = signed.replace(b'"p1"', b'"p2"')
    appended = signed + b"PS: also pay evil@evil.test\r\n"
    for variant in (changed, appended):
        assert (await dkim.verify(variant, dns=table)).status == "fail"


async def test_relaxed_canonicalization_tolerates_refolding() -> None:
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=ED)
    refolded = signed.replace(b"Subject: PAY |   thanks", b"Subject:  PAY |\r\n  thanks")
    refolded = refolded.replace(b"trailing \t spaces\t\r\n", b"trailing spaces\r\n")
    assert refolded != signed
    assert (await dkim.verify(refolded, dns=dkim.table_dns(record_table(s1=ED)))).status == "pass"


async def test_signature_with_l_tag_is_refused() -> None:
    # dkimpy itself signs with l= on request, and accepts appended text under it.
    sig = dkimpy.sign(
        MESSAGE, b"s1", b"example.com", RSA.private_pem(), canonicalize=(b"relaxed", b"relaxed"), length=True
    )
    appended = sig + MESSAGE + b"appended by someone else\r\n"
    assert dkimpy_verifies(appended, RSA)
    result = await dkim.verify(appended, dns=dkim.table_dns(record_table(s1=RSA)))
    assert result.status == "fail" and "l=" in result.signatures[0].detail


async def test_every_signature_is_checked_not_only_the_top_one() -> None:
    inner = dkim.sign(MESSAGE, selector="good", domain="example.com", key=RSA)
    # A second signature on top whose key is not the one published: it fails.
    outer = dkim.sign(inner, selector="rotated", domain="example.com", key=ED)
    table = {
        "good._domainkey.example.com": RSA.dns_txt_record(),
        "rotated._domainkey.example.com": dkim.DkimKey.generate_ed25519().dns_txt_record(),
    }
    assert not dkimpy.verify(outer, dnsfunc=lambda name, timeout=5: table[name.decode().rstrip(".")].encode())
    result = await dkim.verify(outer, dns=dkim.table_dns(table))
    assert result.status == "pass" and result.domain == "example.com"
    assert [s.status for s in result.signatures] == ["fail", "pass"]
    assert [s.selector for s in result.signatures] == ["rotated", "good"]


async def test_dns_failure_is_temperror_and_missing_key_is_fail() -> None:
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=RSA)
    temp = await dkim.verify(signed, dns=dkim.table_dns({"s1._domainkey.example.com": "!temperror"}))
    assert temp.status == "temperror" and temp.signatures[0].status == "temperror"
    missing = await dkim.verify(signed, dns=dkim.table_dns({}))
    assert missing.status == "fail" and "no key" in missing.detail

    async def broken(name: str) -> str | None:
        raise TimeoutError(name)

    assert (await dkim.verify(signed, dns=broken)).status == "temperror"
    # A failing signature beside a temperror one: temperror (the retry may pass).
    both = dkim.sign(signed, selector="s2", domain="example.com", key=ED)
    mixed = await dkim.verify(
        both,
        dns=dkim.table_dns(
            {"s2._domainkey.example.com": "!temperror", "s1._domainkey.example.com": "v=DKIM1; p="}
        ),
    )
    assert mixed.status == "temperror"


async def test_unsigned_message_is_none() -> None:
    result = await dkim.verify(MESSAGE, dns=dkim.table_dns({}))
    assert result.status == "none" and result.from_domain == "example.com" and not result.aligned


@pytest.mark.parametrize(
    ("from_header", "signing_domain", "aligned"),
    [
        (b"From: alice@example.com", "example.com", True),
        (b"From: Bob <bob@mail.example.com>", "example.com", True),
        (b"From: alice@example.com", "other.org", False),
        (b"From: alice@notexample.com", "example.com", False),
        (b"From: alice@example.com\r\nFrom: mallory@evil.test", "example.com", False),
    ],
)
async def test_alignment_with_the_from_domain(from_header: bytes, signing_domain: str, aligned: bool) -> None:
    raw = MESSAGE.replace(b"From: Alice Agent <alice@example.com>", from_header)
    duplicate_from = from_header.count(b"From:") > 1
    if duplicate_from:
        # The shared header reader refuses two From fields: our signer will not sign them,
        # and a signature made elsewhere does not make them pass.
        with pytest.raises(UsageError, match="duplicate"):
            dkim.sign(raw, selector="s1", domain=signing_domain, key=ED)
        signed = dkimpy.sign(raw, b"s1", signing_domain.encode(), ED.ed25519_seed_b64().encode(),
                             signature_algorithm=b"ed25519-sha256")
    else:
        signed = dkim.sign(raw, selector="s1", domain=signing_domain, key=ED)
    result = await dkim.verify(
        signed, dns=dkim.table_dns({f"s1._domainkey.{signing_domain}": ED.dns_txt_record()})
    )
    assert result.status == ("fail" if duplicate_from else "pass") and result.aligned is aligned


async def test_weak_algorithm_and_malformed_signatures_fail_without_raising() -> None:
    rsa_sha1 = (
        dkimpy.sign(
            MESSAGE,
            b"s1",
            b"example.com",
            RSA.private_pem(),
            canonicalize=(b"relaxed", b"relaxed"),
            signature_algorithm=b"rsa-sha1",
        )
        + MESSAGE
    )
    result = await dkim.verify(rsa_sha1, dns=dkim.table_dns(record_table(s1=RSA)))
    assert result.status == "fail" and "rsa-sha1" in result.detail
    for garbage in (
        b"DKIM-Signature: v=1; a=rsa-sha256; d=example.com\r\n" + MESSAGE,
        b"DKIM-Signature: v=1; v=1; a=rsa-sha256; b=; bh=; d=x; h=from; s=s\r\n" + MESSAGE,
        b"DKIM-Signature: v=1; a=rsa-sha256; b=!!!; bh=???; d=example.com; h=from; s=s1\r\n" + MESSAGE,
        b"DKIM-Signature: v=1; a=rsa-sha256; d=x; s=s; h=from; bh=; b=\r\n continuation\r\n \r\n" + MESSAGE,
        # dkimpy's own parser refuses a space before the colon; that must be a fail, not a crash
        dkim.sign(MESSAGE, selector="s1", domain="example.com", key=RSA).replace(b"To:", b"To :"),
    ):
        assert (await dkim.verify(garbage, dns=dkim.table_dns(record_table(s1=RSA)))).status == "fail"
    # A header block the shared reader refuses carries no verdict to trust: unsigned, none.
    refused = await dkim.verify(b" continuation first\r\n" + MESSAGE, dns=dkim.table_dns({}))
    assert refused.status == "none" and "leading_continuation" in refused.detail


header_text = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=40)
body_line = st.text(st.sampled_from("ab c\t.{}\"'=;:-"), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    subject=st.lists(header_text, min_size=1, max_size=4),
    fold=st.booleans(),
    body=st.lists(body_line, max_size=8),
    trailing_blank=st.integers(0, 3),
    extra=st.sampled_from(
        ["", "Cc: c@example.net\r\n", "Reply-To: r@example.com\r\nX-Envelopay-Type: PAY\r\n"]
    ),
    kind=st.sampled_from(["rsa", "ed25519"]),
)
def test_any_message_we_sign_verifies_under_dkimpy(
    subject: list[str], fold: bool, body: list[str], trailing_blank: int, extra: str, kind: str
) -> None:
    sep = "\r\n\t " if fold else "  "
    raw = (
        f"From: a@example.com\r\nTo: b@example.org\r\n{extra}Subject: {sep.join(subject)}\r\n"
        "Message-ID: <x@example.com>\r\n\r\n" + "\r\n".join(body) + "\r\n" * trailing_blank
    ).encode()
    signed = dkim.sign(raw, selector="s1", domain="example.com", key=KEYS[kind])
    assert dkimpy_verifies(signed, KEYS[kind])


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=400))
def test_verify_never_raises_on_any_bytes(raw: bytes) -> None:
    result = asyncio.run(
        dkim.verify(
            b"DKIM-Signature: v=1; s=s1; d=example.com\r\n" + raw, dns=dkim.table_dns(record_table(s1=RSA))
        )
    )
    assert result.status in ("fail", "temperror")
    assert asyncio.run(dkim.verify(raw, dns=dkim.table_dns({}))).status in ("none", "fail")


def test_keys_round_trip_and_records() -> None:
    again = dkim.DkimKey.from_pem(RSA.private_pem())
    assert again.algorithm == "rsa-sha256" and again.public_b64() == RSA.public_b64()
    seed = ED.ed25519_seed_b64()
    assert dkim.DkimKey.load(seed).public_b64() == ED.public_b64()
    assert dkim.DkimKey.load(ED.private_pem()).public_b64() == ED.public_b64()
    assert len(base64.b64decode(ED.public_b64())) == 32
    assert RSA.dns_txt_record().startswith("v=DKIM1; k=rsa; p=MII")
    assert ED.dns_txt_record().startswith("v=DKIM1; k=ed25519; p=")
    assert RSA.private.key_size == 2048
    with pytest.raises(UsageError):
        dkim.DkimKey.generate_rsa(1024)
    for bad in ("not a key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "AAAA"):
        with pytest.raises(ConfigError):
            dkim.DkimKey.load(bad)
    with pytest.raises(UsageError):
        dkim.sign(MESSAGE, selector="s1; x=1", domain="example.com", key=ED)
    with pytest.raises(UsageError):
        dkim.sign(b" folded first\r\n\r\nbody", selector="s1", domain="example.com", key=ED)


# ----------------------------------------------------------- production resolver


class _TxtServer(asyncio.DatagramProtocol):
    """A tiny authoritative UDP DNS server: TXT answers from a table, SERVFAIL on demand."""

    def __init__(self, records: dict[str, str], servfail: set[str]) -> None:
        self.records, self.servfail = records, servfail
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        name = query.question[0].name.to_text().rstrip(".")
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
        elif name in self.records:
            value = self.records[name]
            # Long records arrive as several character-strings; the lookup must join them.
            chunks = " ".join(f'"{value[i : i + 200]}"' for i in range(0, len(value), 200))
            response.answer.append(
                dns.rrset.from_text(query.question[0].name, 60, dns.rdataclass.IN, dns.rdatatype.TXT, chunks)
            )
        else:
            response.set_rcode(dns.rcode.NXDOMAIN)
        assert self.transport is not None
        self.transport.sendto(response.to_wire(), addr)


@pytest.fixture
async def dns_server() -> AsyncIterator[int]:
    records = record_table(s1=RSA)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: _TxtServer(records, {"broken._domainkey.example.com"}), local_addr=("127.0.0.1", 0)
    )
    yield transport.get_extra_info("sockname")[1]
    transport.close()


async def test_resolver_lookup_against_a_real_dns_server(dns_server: int) -> None:
    lookup = dkim.resolver_dns(timeout=5.0, nameservers=["127.0.0.1"], port=dns_server)
    assert await lookup("s1._domainkey.example.com") == RSA.dns_txt_record()
    assert await lookup("nothing._domainkey.example.com") is None
    with pytest.raises(dkim.DnsTemporaryError):
        await lookup("broken._domainkey.example.com")
    signed = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=RSA)
    assert (await dkim.verify(signed, dns=lookup)).status == "pass"
    other = dkim.sign(MESSAGE, selector="broken", domain="example.com", key=RSA)
    assert (await dkim.verify(other, dns=lookup)).status == "temperror"


# ------------------------------------------------------- Authentication-Results


AUTHRES = b"Authentication-Results: mx.envelopay.test; dkim=pass (good) header.d=example.com header.s=s1\r\n"


def test_trusted_authres_only_from_the_configured_id_at_the_top() -> None:
    raw = AUTHRES + MESSAGE
    trusted = dkim.trusted_authres(raw, authserv_id="mx.envelopay.test")
    assert (
        trusted is not None and trusted.status == "pass" and trusted.aligned and trusted.source == "authres"
    )
    assert dkim.trusted_authres(raw, authserv_id="other.mx") is None
    forged_below = b"Authentication-Results: evil.test; dkim=fail\r\n" + AUTHRES + MESSAGE
    assert dkim.trusted_authres(forged_below, authserv_id="mx.envelopay.test") is None
    failing = (
        b"Authentication-Results: mx.envelopay.test; spf=pass; dkim=fail header.d=example.com\r\n" + MESSAGE
    )
    result = dkim.trusted_authres(failing, authserv_id="mx.envelopay.test")
    assert result is not None and result.status == "fail"


def test_strip_authres_removes_only_headers_claiming_our_id() -> None:
    raw = (
        b"Authentication-Results: mx.envelopay.test;\r\n\tdkim=pass header.d=example.com\r\n"
        b"Authentication-Results: other.mx; dkim=none\r\n" + MESSAGE
    )
    stripped = dkim.strip_authres(raw, authserv_id="mx.envelopay.test")
    assert b"mx.envelopay.test" not in stripped and b"dkim=pass header.d" not in stripped
    assert stripped.startswith(b"Authentication-Results: other.mx; dkim=none\r\n")
    assert stripped.endswith(MESSAGE)


# -------------------------------------------------------------------- policy

PASS = dkim.DkimResult("pass", "example.com", True)
UNALIGNED = dkim.DkimResult("pass", "other.org", False)
FAIL = dkim.DkimResult("fail", "example.com", False, "bad")
TEMP = dkim.DkimResult("temperror", "example.com")
NONE = dkim.DkimResult("none")


@pytest.mark.parametrize(
    ("result", "policy", "proof", "action"),
    [
        (PASS, "required", True, "accept"),
        (UNALIGNED, "required", True, "reject"),
        (FAIL, "required", True, "reject"),
        (NONE, "required", True, "reject"),
        (TEMP, "required", True, "defer"),
        (NONE, "required", False, "accept"),
        (FAIL, "required", False, "reject"),
        (FAIL, "prefer", True, "reject"),
        (FAIL, "prefer", False, "reject"),
        (NONE, "prefer", True, "accept"),
        (TEMP, "prefer", True, "accept"),
        (UNALIGNED, "prefer", True, "accept"),
        (FAIL, "off", True, "accept"),
        (NONE, "off", True, "accept"),
    ],
)
def test_policy_table(result: dkim.DkimResult, policy: dkim.DkimPolicy, proof: bool, action: str) -> None:
    decision = dkim.apply_policy(result, policy, proof_carrying=proof)
    assert decision.action == action
    assert decision.oops == ("dkim_failed" if action == "reject" else None)


def test_trusted_authres_stands_in_for_local_verification() -> None:
    authres = dkim.trusted_authres(AUTHRES + MESSAGE, authserv_id="mx.envelopay.test")
    decision = dkim.apply_policy(NONE, "required", proof_carrying=True, authres=authres)
    assert decision.action == "accept" and decision.result.source == "authres"


def test_proof_carrying_types() -> None:
    assert all(dkim.is_proof_carrying(t) for t in ("PAY", "OFFER", "ACCEPT"))
    assert not dkim.is_proof_carrying("ORDER") and dkim.is_proof_carrying("ORDER", prepaid_order=True)
    assert not any(
        dkim.is_proof_carrying(t) for t in ("WHICH", "METHODS", "INVOICE", "FULFILL", "OOPS", None)
    )


async def test_duplicate_singleton_header_fails_even_when_the_signer_did_not_oversign() -> None:
    # dkimpy's default signing oversigns only From: a Subject added on top still verifies there.
    sig = dkimpy.sign(
        MESSAGE, b"s1", b"example.com", RSA.private_pem(), canonicalize=(b"relaxed", b"relaxed")
    )
    forged = sig + b"Subject: PAY | send 100 USDC to evil\r\n" + MESSAGE
    assert dkimpy_verifies(forged, RSA)
    result = await dkim.verify(forged, dns=dkim.table_dns(record_table(s1=RSA)))
    assert result.status == "fail" and "subject" in result.detail and not result.aligned
    # The shared header reader refuses the block before any signature is looked at.
    assert result.signatures == () and "duplicate" in result.detail


SIGNED_FOR_FUZZ = dkim.sign(MESSAGE, selector="s1", domain="example.com", key=ED)


@settings(max_examples=200, deadline=None)
@given(position=st.integers(0, len(SIGNED_FOR_FUZZ)), insert=st.binary(max_size=12), cut=st.integers(0, 4))
def test_verify_never_raises_on_a_mangled_signed_message(position: int, insert: bytes, cut: int) -> None:
    mangled = SIGNED_FOR_FUZZ[:position] + insert + SIGNED_FOR_FUZZ[position + cut :]
    result = asyncio.run(dkim.verify(mangled, dns=dkim.table_dns(record_table(s1=ED))))
    assert result.status in ("pass", "fail", "none", "temperror")
    if mangled == SIGNED_FOR_FUZZ:
        assert result.status == "pass"


# ---------------------------------------------------------------- fast path


def _mutations(signed: bytes, rng: Any) -> list[bytes]:
    """Small edits of a signed message: byte flips, white space, folds, case, added headers,
    VT/FF, a last line without CRLF."""
    out: list[bytes] = []
    for _ in range(150):
        m = signed
        i = rng.randrange(len(m))
        op = rng.randrange(9)
        if op == 0:
            m = m[:i] + bytes([rng.randrange(256)]) + m[i + 1 :]
        elif op == 1:
            m = m[:i] + rng.choice([b" ", b"\t", b"\r\n", b"\r", b"\r\n "]) + m[i:]
        elif op == 2:
            m = m[:i] + m[i + 1 :]
        elif op == 3:
            m = b"Subject: other\r\n" + m
        elif op == 4:
            m = m.replace(b"Subject", b"SUBJECT", 1)
        elif op == 5:
            m = m.replace(b"From:", b"From :", 1)
        elif op == 6:
            m = m + b" \r\n\r\n"
        elif op == 7:  # where dkimpy's strip() and RFC 6376's WSP differ
            m = m[:i] + rng.choice([b"\x0b", b"\x0c", b" \x0c"]) + m[i:]
        else:  # a last line without CRLF, ending in white space
            m = m.rstrip(b"\r\n") + rng.choice([b" ", b"\t", b" \t "])
        out.append(m)
    return out


@pytest.mark.parametrize("kind", ["rsa", "ed25519"])
async def test_fast_path_gives_dkimpys_verdict(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast verification path answers exactly what the dkimpy-only path answers, on
    our signatures and dkimpy's (simple and relaxed), intact and tampered with."""
    import random

    key = KEYS[kind]
    seed_or_pem = key.ed25519_seed_b64().encode() if kind == "ed25519" else key.private_pem()
    alg = b"ed25519-sha256" if kind == "ed25519" else b"rsa-sha256"
    signed = [dkim.sign(MESSAGE, selector="s1", domain="example.com", key=key)]
    for canon in ((b"simple", b"simple"), (b"relaxed", b"simple"), (b"relaxed", b"relaxed")):
        signed.append(dkimpy.sign(MESSAGE, b"s1", b"example.com", seed_or_pem, canonicalize=canon,
                                  signature_algorithm=alg) + MESSAGE)
    rng = random.Random(20261130)
    cases = [m for s in signed for m in [s, *_mutations(s, rng)]]
    dns = dkim.table_dns(record_table(s1=key))
    calls: list[int] = []
    real = dkimpy.DKIM.verify
    monkeypatch.setattr(dkimpy.DKIM, "verify", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    assert (await dkim.verify(signed[0], dns=dns)).status == "pass"
    assert calls == []  # the fast path answered alone
    fast = [await dkim.verify(m, dns=dns) for m in cases]
    monkeypatch.setattr(dkim.verifying, "_fast_pass", lambda *a: False)
    slow = [await dkim.verify(m, dns=dns) for m in cases]
    assert fast == slow
    assert all(r.status == "pass" for r in fast[:1])
    assert sum(r.status == "pass" for r in fast) >= len(signed)
