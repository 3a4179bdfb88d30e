"""Executing payment intents: sign, record, broadcast, record, email; approvals; recovery.

State machine (SPEC.md "Spend enforcer"):

  PENDING --approve--> APPROVED --claim--> RESERVED      PENDING --reject--> REJECTED
  (allowed call) ----------------------->  RESERVED --sign; record tx id + claim broadcast--> BROADCAST
  BROADCAST --chain confirms--> PAID --email--> SENT
  (SIGNED --record "broadcast"--> BROADCAST: intents recorded by earlier versions only)
  RESERVED | SIGNED | APPROVED --(killed)--> FAILED;  BROADCAST --(tx expired or failed)--> FAILED

claim and the RESERVED → BROADCAST write (tx id, bytes and broadcast claim in one statement)
each require the agent to be ACTIVE in the same statement, and BROADCAST is committed before
the bytes leave: a kill committed first always wins.
Recovery of a BROADCAST intent asks the chain first and only ever re-sends the recorded
bytes; nothing signs a second payment for an intent. The email is at least once: a crash
between delivery and its record sends it again with the same Message-ID.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import cast

from envelopay.enforcer.send.model import Agent, SendRequest
from envelopay.enforcer.send.policy import fingerprint
from envelopay.enforcer.spend.intent import Intent
from envelopay.enforcer.spend.legs import bound_leg
from envelopay.enforcer.spend.model import PaymentDecision, PaymentDisposition
from envelopay.enforcer.spend.parts import PaymentParts
from envelopay.enforcer.spend.states import DRIVEN, INTENTS, Move
from envelopay.enforcer.spend.vault import VaultError
from envelopay.errors import RailError, StoreError, TransportError, UsageError
from envelopay.mail.transport import Envelope, EnvelopeOpener
from envelopay.protocol.compose import message_json
from envelopay.rails.binding import StatementSigner
from envelopay.rails.custodial import CustodialPayer, SignedPayment

__all__ = ["approve", "execute", "recover", "reject", "run"]


async def run(
    p: PaymentParts,
    intent_id: str,
    *,
    live: bool,
    agent: Agent | None = None,
    intent: Intent | None = None,
    sealed: bytes | None = None,
) -> PaymentDisposition:
    """Drive one intent as far as it goes now. `live` is the first execution of a call
    (crash hooks fire only there); otherwise this is recovery. `sealed` is the wallet's
    sealed key when the caller read it already."""
    try:
        i = intent if intent is not None and intent.id == intent_id else await p.store.get(intent_id)
        if i is None:
            return PaymentDisposition(status="unknown", id=intent_id)
        if i.id in p._active:  # another task of this process is executing it
            return p.disposition(i)
        p._active.add(i.id)
        envelope: Envelope | None = None
        staged: _Staged | None = None
        try:
            async with p.lock_for(i.wallet_id):
                if not live:
                    # Another enforcer process on this store may have advanced it while this
                    # one waited for the wallet: go on from the recorded state. (A live
                    # intent was just made or claimed by this call; the conditional
                    # transitions still refuse any stale step.)
                    i = await _reread(p, i)
                elif i.state == "RESERVED":
                    envelope = _open_envelope(p, i)
                    staged = _Staged(envelope)
                i = await _advance(p, i, live, sealed, staged, agent)
            if i.state == "PAID":
                if live:
                    p.crash("after_record")
                elif not await p.store.take_delivery(i.id, p.clock()):
                    # The process that moved the money is alive and delivering its PAY:
                    # a second deliverer would send it twice.
                    return p.disposition(i)
                i = await _deliver(p, i, live, agent, envelope, staged)
            return p.disposition(i)
        finally:
            if envelope is not None:
                envelope.abort()  # no-op once delivered; else nothing reaches the server
            p._active.discard(intent_id)
    except StoreError as exc:
        return PaymentDisposition(
            status="unknown", code="store_error", reason=f"store error: {exc}", id=intent_id
        )


def _open_envelope(p: PaymentParts, i: Intent) -> Envelope | None:
    """The PAY's SMTP transaction (MAIL FROM, RCPT TO, DATA), started while the payment is
    signed and broadcast: its envelope is decided with the payment; only the body waits for
    the tx id (_Staged writes it then), and its final dot goes only after the money moved
    (_deliver); on any other outcome the transaction is aborted, and a message without its
    final dot is not delivered (RFC 5321), so the overlap can neither send a PAY for money
    that did not move nor send one twice. Any fault of the early transaction falls back to
    an ordinary delivery (mail.transport's SmtpEnvelope, GardenEnvelope)."""
    mail = i.request.get("mail")
    transport = p.enforcer.transport
    # hasattr, not isinstance on the runtime-checkable Protocol (which inspects every member).
    if mail is None or not hasattr(transport, "open_envelope"):
        return None
    return cast(EnvelopeOpener, transport).open_envelope(sender=str(mail["from"]), recipient=str(mail["to"]))


class _Staged:
    """The PAY written into its open transaction as soon as its tx id exists, short of the
    final dot: the server reads it while the payment is recorded and broadcast, and only
    the dot waits for the money (SmtpEnvelope.stage). A server that refuses the PAY for
    good (a 5xx) is heard before the broadcast: the payment does not go (no money without
    its email). Anything else about the early body is left to _deliver's fallback."""

    def __init__(self, envelope: Envelope | None) -> None:
        self.envelope = envelope
        self.mail: tuple[SendRequest, bytes] | None = None  # composed, bound and signed

    async def write(self, mail: tuple[SendRequest, bytes]) -> str:
        """"" or why the PAY can never be delivered."""
        if self.envelope is None:
            self.mail = mail
            return ""
        refused = await self.envelope.stage(mail[1], wait=0.5)
        if not refused:
            self.mail = mail
        return refused


def _pay_mail(
    p: PaymentParts, i: Intent, payer: CustodialPayer, tx_id: str, agent: Agent, sign: StatementSigner
) -> tuple[SendRequest, bytes] | str:
    """The PAY (OFFER, ACCEPT, prepaid ORDER) carrying the proof of `tx_id`, bound to the
    paying wallet with `sign`, composed and DKIM-signed; or why it cannot be. The same
    statement signed by the same key gives the same bytes, so a PAY recomposed after a
    crash is the PAY that may already have left."""
    mail = i.request["mail"]
    leg = bound_leg(
        str(mail["type"]), mail["body"], payer.proof(tx_id), payee=str(mail["to"]),
        presenter=str(mail["from"]), proof_key=payer.proof_key, sign=sign,
    )
    if isinstance(leg, str):
        return leg
    reply = mail.get("in_reply_to")
    req = SendRequest(
        to=mail["to"], sender=mail["from"], msg_type=leg.type, body=json.loads(message_json(leg)),
        message_id=i.message_id, in_reply_to=reply if isinstance(reply, str) else None,
        references=(reply,) if isinstance(reply, str) else (),
    )
    composed = p.enforcer.compose(agent, req, i.message_id, p.clock())
    if isinstance(composed, str):
        return composed
    signed = p.enforcer.sign(composed)
    return signed if isinstance(signed, str) else (req, signed)


async def _vault_signer(p: PaymentParts, i: Intent, payer: CustodialPayer) -> StatementSigner | str:
    """The wallet's binding signer, its key opened from the vault (a PAY composed again
    after the signing call: recovery, or a delivery retried)."""
    sealed = await p.store.sealed(i.wallet_id, i.agent_id)
    if p.vault is None or sealed is None:
        return "the wallet's key is not available to this enforcer"
    try:
        secret = p.vault.open_secret(sealed, agent_id=i.agent_id, wallet_id=i.wallet_id)
    except VaultError as exc:
        return str(exc)
    return lambda message: payer.sign_statement(secret, message)


async def _reread(p: PaymentParts, i: Intent) -> Intent:
    fresh = await p.store.get(i.id)
    assert fresh is not None  # intents are never deleted
    return fresh


async def _fail(p: PaymentParts, i: Intent, code: str, reason: str) -> Intent:
    """No money moved: FAILED, and the caps this intent took are handed back."""
    if INTENTS.may(i.state, Move.FAIL) and await p.store.fail(i.id, i.state, code, reason, p.clock()):
        await p._give_back(i.agent_id, i.taken)
    return await _reread(p, i)


@dataclass(slots=True)
class _Run:
    """What one execution of an intent carries from step to step."""

    p: PaymentParts
    payer: CustodialPayer | None
    live: bool
    sealed: bytes | None
    staged: _Staged | None
    agent: Agent | None


# A driver takes the intent one move on: (the intent, whether to go on driving it now).
_Driver = Callable[[_Run, Intent], Awaitable[tuple[Intent, bool]]]


async def _drive_reserved(r: _Run, i: Intent) -> tuple[Intent, bool]:
    if r.payer is None:
        return await _fail(r.p, i, "unknown_asset", f"no rail pays on {i.chain} here"), False
    i, fresh = await _sign(r.p, r.payer, i, r.live, r.sealed, r.staged, r.agent)
    if fresh:  # recorded as BROADCAST with its bytes just now: send them
        i = await _broadcast(r.p, r.payer, i, r.live)
        return i, i.state != "BROADCAST"  # still BROADCAST: the chain has not confirmed it yet
    # Not ours to broadcast: another executor moved it on (go on from there), or nothing
    # was signed (_sign ends RESERVED only by failing).
    return i, i.state != "RESERVED"


async def _drive_signed(r: _Run, i: Intent) -> tuple[Intent, bool]:
    # Never broadcast yet (an earlier version's record): BROADCAST before the bytes leave.
    if not await r.p.store.mark_broadcast(i.id, r.p.clock()):
        i = await _reread(r.p, i)
        if i.state == "SIGNED":  # the agent was killed: kill beats the broadcast
            return await _fail(r.p, i, "killed", "agent killed before the payment was broadcast"), False
        return i, True
    i = await _broadcast(r.p, r.payer, replace(i, state="BROADCAST"), r.live)
    return i, i.state != "BROADCAST"


async def _drive_broadcast(r: _Run, i: Intent) -> tuple[Intent, bool]:
    assert r.payer is not None and i.tx_id is not None
    try:
        seen = await r.payer.lookup(i.tx_id)  # after a crash: the chain first
    except TransportError as exc:
        await r.p.store.note(i.id, "BROADCAST", f"chain unreachable: {exc}", r.p.clock())
        return await _reread(r.p, i), False
    if seen == "confirmed":
        return await _paid(r.p, i), True
    if seen == "failed":
        return await _fail(r.p, i, "tx_failed", "the transaction failed on chain"), False
    if seen == "pending":
        return i, False
    # missing: the same bytes once more (same signature: at most one payment)
    i = await _broadcast(r.p, r.payer, i, live=False)
    return i, i.state != "BROADCAST"


# The intent states an executor drives (states.DRIVEN), each to its driver; every
# other state is at rest (held, decided, PAID awaiting its email, or final).
_DRIVERS: dict[str, _Driver] = {
    "RESERVED": _drive_reserved,
    "SIGNED": _drive_signed,
    "BROADCAST": _drive_broadcast,
}
assert tuple(_DRIVERS) == DRIVEN


async def _advance(
    p: PaymentParts, i: Intent, live: bool, sealed: bytes | None = None, staged: _Staged | None = None,
    agent: Agent | None = None,
) -> Intent:
    run_ = _Run(p, p.payers.get(i.chain), live, sealed, staged, agent)
    while (driver := _DRIVERS.get(i.state)) is not None:
        i, again = await driver(run_, i)
        if not again:
            break
    return i


async def _sign(
    p: PaymentParts, payer: CustodialPayer, i: Intent, live: bool, sealed: bytes | None,
    staged: _Staged | None = None, agent: Agent | None = None,
) -> tuple[Intent, bool]:
    """(intent, True) when the signed bytes were just recorded with the broadcast claimed.

    One statement records the tx id and bytes and claims the broadcast (RESERVED →
    BROADCAST, requiring ACTIVE), so the tx id is durable before the bytes leave and the
    kill is re-checked at that last write: bytes signed for an agent killed meanwhile are
    dropped unsent. Recovery of a BROADCAST intent asks the chain first, then re-sends only
    these bytes. (SIGNED remains for intents recorded by earlier versions.)"""
    if sealed is None:
        sealed = await p.store.sealed(i.wallet_id, i.agent_id)
    if p.vault is None or sealed is None:
        return await _fail(p, i, "custody", "the wallet's key is not available to this enforcer"), False
    try:
        secret = p.vault.open_secret(sealed, agent_id=i.agent_id, wallet_id=i.wallet_id)
    except VaultError as exc:
        return await _fail(p, i, "custody", str(exc)), False
    try:
        signed = await payer.prepare(secret, token=i.token, amount=i.amount, recipient=i.wallet)
        mail = await _leg_for(p, i, payer, signed.tx_id, secret, agent)
    except RailError as exc:
        return await _fail(p, i, exc.reason, str(exc)[:300]), False
    except UsageError as exc:
        return await _fail(p, i, "invalid_request", str(exc)[:300]), False
    except TransportError as exc:
        return await _fail(p, i, "rail_unavailable", f"nothing was signed: {exc}"[:300]), False
    finally:
        del secret
    if isinstance(mail, str):  # the payee would refuse what we could send: do not pay
        reason = f"the PAY cannot be sent as the payee accepts it, so nothing was paid: {mail}"
        return await _fail(p, i, "pay_unsendable", reason[:300]), False
    if staged is not None and mail is not None:
        refused = await staged.write(mail)
        if refused:  # the signed bytes are dropped unsent
            reason = f"the PAY's email was refused for good, so nothing was paid: {refused}"
            return await _fail(p, i, "pay_mail_refused", reason[:300]), False
    if not await p.store.mark_signed_broadcast(i.id, signed.tx_id, signed.blob, p.clock()):
        i = await _reread(p, i)
        if i.state == "RESERVED":  # killed meanwhile: the signed bytes are dropped unsent
            return await _fail(p, i, "killed", "agent killed before the payment was recorded"), False
        return i, False
    if live:
        p.crash("after_sign")
    return replace(i, state="BROADCAST", tx_id=signed.tx_id, tx_blob=signed.blob), True


async def _leg_for(
    p: PaymentParts, i: Intent, payer: CustodialPayer, tx_id: str, secret: bytes, agent: Agent | None
) -> tuple[SendRequest, bytes] | str | None:
    """The email leg for the payment just signed (None for a counter-leg, whose email the
    caller sends), composed and bound before anything is broadcast."""
    if i.request.get("mail") is None:
        return None
    if agent is None or agent.id != i.agent_id:
        agent = await p.enforcer.store.agent_by_id(i.agent_id)
    if agent is None:
        return "the agent is gone"
    return _pay_mail(p, i, payer, tx_id, agent, lambda message: payer.sign_statement(secret, message))


async def _broadcast(p: PaymentParts, payer: CustodialPayer | None, i: Intent, live: bool) -> Intent:
    assert payer is not None and i.tx_id is not None and i.tx_blob is not None
    try:
        outcome, detail = await payer.broadcast(SignedPayment(i.tx_id, i.tx_blob))
    except TransportError as exc:
        await p.store.note(i.id, "BROADCAST", f"broadcast not confirmed: {exc}", p.clock())
        return await _reread(p, i)
    if live:
        p.crash("after_broadcast")
    if outcome == "sent" and detail != "not yet confirmed":
        # Live, the email follows at once and its record moves BROADCAST to SENT; PAID is
        # written only if it cannot go out now (recovery asks the chain first anyway).
        return replace(i, state="PAID") if live else await _paid(p, i)
    try:
        seen = await payer.lookup(i.tx_id)
    except TransportError as exc:
        await p.store.note(i.id, "BROADCAST", f"chain unreachable: {exc}", p.clock())
        return await _reread(p, i)
    if seen == "confirmed":
        return await _paid(p, i)
    if seen == "pending" or outcome == "sent":
        await p.store.note(i.id, "BROADCAST", "broadcast; not yet confirmed", p.clock())
        return await _reread(p, i)
    code = "expired" if outcome == "expired" else "tx_failed"
    return await _fail(p, i, code, detail or code)


async def _paid(p: PaymentParts, i: Intent) -> Intent:
    if await p.store.mark_paid(i.id, p.clock()):
        return replace(i, state="PAID")
    return await _reread(p, i)


async def _deliver(
    p: PaymentParts, i: Intent, live: bool, agent: Agent | None, envelope: Envelope | None = None,
    staged: _Staged | None = None,
) -> Intent:
    """The email leg, after the money moved: at least once, with the intent's Message-ID."""
    if agent is None or agent.id != i.agent_id:
        agent = await p.enforcer.store.agent_by_id(i.agent_id)
    payer = p.payers.get(i.chain)
    if agent is None or payer is None or i.tx_id is None:
        return i
    if i.request.get("mail") is None:  # a counter-leg: the caller sends its own email
        if await p.store.mark_sent(i.id, "payment only: the caller sends the email", p.clock()):
            return replace(i, state="SENT", reason="payment only: the caller sends the email")
        return await _reread(p, i)
    # Recovery first asks whether the email already left (crash between its record and ours).
    prior = None if live else await p.enforcer.store.send_by_message_id(agent.id, i.message_id)
    if prior is None or prior.state != "SENT":
        now = p.clock()
        mail: tuple[SendRequest, bytes] | str
        if staged is not None and staged.mail is not None:
            mail = staged.mail
        else:
            sign = await _vault_signer(p, i, payer)
            mail = sign if isinstance(sign, str) else _pay_mail(p, i, payer, i.tx_id, agent, sign)
        # The money moved before any kill that could stop it (BROADCAST requires ACTIVE): the
        # PAY carrying its proof goes out even if the agent was killed since (at least once).
        problem = (
            mail
            if isinstance(mail, str)
            else await p.enforcer.transmit(
                agent, mail[0], mail[1], recheck_kill=False, envelope=envelope, signed=True
            )
        )
        if problem or isinstance(mail, str):
            await p.store.paid_note(i.id, f"paid; the email is not delivered yet: {problem}"[:500], now)
            return await _reread(p, i)
        req = mail[0]
        send = p.enforcer.store.send_step(
            id=p.new_id(),
            agent_id=agent.id,
            state="SENT",
            reason=f"pay-then-send {i.id}",
            request=req,
            fingerprint=fingerprint(req),
            message_id=i.message_id,
            now=p.clock(),
        )
        done = await p.store.finish_sent(send, i.id, p.clock())
    else:  # delivered before a crash: only the intent's own record is missing
        done = await p.store.mark_sent(i.id, "", p.clock())
    if done:
        return replace(i, state="SENT", reason="")
    return await _reread(p, i)


# -- approvals and recovery -------------------------------------------------------------


async def approve(
    p: PaymentParts, intent_id: str, by: str = "operator", policy: str | None = None
) -> PaymentDecision:
    """PENDING → APPROVED (one conditional UPDATE that also requires an ACTIVE agent and,
    with `policy`, the spend policy the operator was shown), then execute. A second
    approve finds the row no longer PENDING: it pays once."""
    i = await p.store.get(intent_id)
    if i is None:
        return PaymentDecision(ok=False, state="MISSING", detail="no such approval")
    agent = await p.enforcer.store.agent_by_id(i.agent_id)
    if agent is None or agent.killed:
        return PaymentDecision(ok=False, state=i.state, detail="agent is killed: approval refused")
    if not await p.store.approve(intent_id, by, p.clock(), policy):
        seen = await _reread(p, i)
        return PaymentDecision(ok=False, state=seen.state, detail=await _not_approved(p, seen, policy))
    return await execute(p, intent_id, agent)


async def _not_approved(p: PaymentParts, seen: Intent, policy: str | None) -> str:
    if seen.state != "PENDING":
        return "not pending"
    agent = await p.enforcer.store.agent_by_id(seen.agent_id)
    if policy is None or agent is None or agent.killed:
        return "agent is killed: approval refused"
    return ("content_changed: the spend policy changed after the approval was shown; nothing "
            "was decided — look again")


async def execute(p: PaymentParts, intent_id: str, agent: Agent | None = None) -> PaymentDecision:
    i = await p.store.get(intent_id)
    if i is None:
        return PaymentDecision(ok=False, state="MISSING", detail="no such approval")
    if not await p.store.claim(intent_id, p.clock()):
        i = await _reread(p, i)
        if i.state == "APPROVED":  # the agent was killed after the approval: kill wins
            i = await _fail(p, i, "killed", "agent killed before execution")
            return PaymentDecision(ok=False, state=i.state, detail=i.reason, disposition=p.disposition(i))
        return PaymentDecision(ok=False, state=i.state, detail="not approved")
    d = await run(p, intent_id, live=True, agent=agent)
    return PaymentDecision(
        ok=d.status == "paid_and_sent", state=(d.state or "").upper(), detail=d.reason, disposition=d
    )


async def reject(
    p: PaymentParts, intent_id: str, by: str = "operator", reason: str = "rejected by operator"
) -> PaymentDecision:
    if not await p.store.reject(intent_id, by, reason, p.clock()):
        i = await p.store.get(intent_id)
        return PaymentDecision(ok=False, state=i.state if i else "MISSING", detail="not pending")
    i = await p.store.get(intent_id)
    assert i is not None
    return PaymentDecision(ok=True, state="REJECTED", disposition=p.disposition(i))


async def recover(p: PaymentParts) -> int:
    """At start, before serving: finish every intent a crash left in flight."""
    count = 0
    for i in await p.store.in_flight():
        if i.state == "APPROVED":
            await execute(p, i.id)
        else:
            await run(p, i.id, live=False)
        count += 1
    return count
