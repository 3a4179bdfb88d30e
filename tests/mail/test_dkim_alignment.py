"""Issue 11, item 3: the From that DKIM verified is the From the engine acts on.

The attack: a PAY signed by evil.test, whose first header line `From : mallory@evil.test`
the DKIM verifier read as From (aligned with d=evil.test) while the parser dropped it as
an mbox separator and, splitting on a bare CR, read `From: buyer@agents.test`. On the
old main this passed `required` with From buyer. Now the shared header reader refuses
it in both, and `dkim_aligned` (what the engine calls) needs both readings to agree.
"""

from __future__ import annotations

import json

import dkim as dkimpy

from envelopay import dkim
from envelopay.protocol.parse import parse

EVIL = dkim.DkimKey.generate_ed25519()
BUYER_KEY = dkim.DkimKey.generate_ed25519()
DNS = dkim.table_dns({
    "s1._domainkey.evil.test": EVIL.dns_txt_record(),
    "s1._domainkey.agents.test": BUYER_KEY.dns_txt_record(),
})
PAY = {
    "v": "0.1.0", "type": "pay", "id": "pay_1", "amount": "1000000", "token": "USDC", "chain": "base",
    "proof": {"tx": "0x" + "ab" * 32}, "invoice_ref": "inv_1",
}
TAIL = (
    b"To: worker@garden.local\r\nSubject: PAY\r\nDate: Mon, 30 Nov 2026 12:00:00 +0000\r\n"
    b"Message-ID: <attack1@evil.test>\r\nMIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n"
    + json.dumps(PAY).encode() + b"\r\n"
)
ATTACK = b"From : mallory@evil.test\r\nX-Pad: a\rFrom: buyer@agents.test\r\n" + TAIL


def _dkimpy_sign(raw: bytes, domain: bytes, key: dkim.DkimKey) -> bytes:
    # Mallory signs with her own tool (dkimpy), exactly the bytes she sends, and places
    # the signature below the first line, which must stay first for the parser to drop it.
    first, rest = raw.split(b"\r\n", 1)
    return first + b"\r\n" + dkimpy.sign(
        raw, b"s1", domain, key.ed25519_seed_b64().encode(), signature_algorithm=b"ed25519-sha256",
        canonicalize=(b"relaxed", b"relaxed"), include_headers=[b"from", b"to", b"subject", b"message-id"],
    ) + rest


async def test_the_attack_no_longer_passes_dkim_nor_parses_as_from_buyer() -> None:
    signed = _dkimpy_sign(ATTACK, b"evil.test", EVIL)
    result = await dkim.verify(signed, dns=DNS)
    parsed = parse(signed)
    # Old main: status pass, aligned (From mallory) -- and parse gave a valid PAY From buyer.
    assert result.status == "fail" and not result.aligned and "header refused" in result.detail
    assert not parsed.valid and parsed.from_addr != "buyer@agents.test"
    assert not dkim.dkim_aligned(result, "buyer@agents.test")
    decision = dkim.apply_policy(result, "required", proof_carrying=True, from_address="buyer@agents.test")
    assert decision.action == "reject" and decision.oops == "dkim_failed"


async def test_a_pass_from_another_domain_is_not_aligned_with_the_from_acted_on() -> None:
    raw = b"From: buyer@agents.test\r\n" + TAIL
    signed = dkim.sign(raw, selector="s1", domain="evil.test", key=EVIL)
    result = await dkim.verify(signed, dns=DNS)
    assert result.status == "pass" and result.from_address == "buyer@agents.test"
    assert not dkim.dkim_aligned(result, "buyer@agents.test")
    acted_on = parse(signed).from_addr
    decision = dkim.apply_policy(result, "required", proof_carrying=True, from_address=acted_on)
    assert decision.action == "reject"


async def test_aligned_only_when_the_verified_from_is_the_from_acted_on() -> None:
    raw = b"From: Buyer <buyer@Agents.test>\r\n" + TAIL
    signed = dkim.sign(raw, selector="s1", domain="agents.test", key=BUYER_KEY)
    result = await dkim.verify(signed, dns=DNS)
    parsed = parse(signed)
    assert result.status == "pass" and parsed.valid
    assert dkim.dkim_aligned(result, parsed.from_addr)
    assert dkim.dkim_aligned(result, "buyer@agents.test")  # domains compare case-insensitively
    # Any other From (a second reading of the same message) is not vouched for.
    assert not dkim.dkim_aligned(result, "mallory@agents.test")
    assert not dkim.dkim_aligned(result, "Buyer@agents.test")  # local parts compare exactly
    assert not dkim.dkim_aligned(result, None)
    decision = dkim.apply_policy(result, "required", proof_carrying=True, from_address=parsed.from_addr)
    assert decision.action == "accept"


async def test_relaxed_alignment_accepts_a_parent_domain_never_a_sibling_or_child() -> None:
    for from_domain, d, ok in [
        ("agents.test", "agents.test", True),
        ("mail.agents.test", "agents.test", True),
        ("agents.test", "mail.agents.test", False),
        ("other.agents.test", "mail.agents.test", False),
        ("notagents.test", "agents.test", False),
    ]:
        verdict = dkim.SignatureVerdict(0, "pass", d, "s1", "ed25519-sha256", dkim.aligned(d, from_domain))
        result = dkim.DkimResult("pass", d, verdict.aligned, signatures=(verdict,),
                                 from_domain=from_domain, from_address=f"b@{from_domain}")
        assert dkim.dkim_aligned(result, f"b@{from_domain}") is ok, (from_domain, d)


async def test_a_trusted_authres_pass_is_aligned_with_its_own_from() -> None:
    ar = b"Authentication-Results: gw.agents.test; dkim=pass header.d=agents.test\r\n"
    raw = ar + b"From: b@agents.test\r\n" + TAIL
    result = dkim.trusted_authres(raw, authserv_id="gw.agents.test")
    assert result is not None and result.from_address == "b@agents.test"
    assert dkim.dkim_aligned(result, "b@agents.test") and not dkim.dkim_aligned(result, "c@agents.test")
