"""The send enforcer: identities from tokens, the ordered checks, race-free caps, the
approval queue and the kill switch. Transport-agnostic: the HTTP service, the console and
the tests all call this object.

At-least-once: an approved send is delivered and THEN its outcome is recorded; a crash in
between can resend once on re-execution (SMTP has no idempotency token; losing a send is
the worse failure). The outcome record makes every later re-execution a no-op.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import re
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

from envelopay.enforcer.send.mime import compose_request
from envelopay.enforcer.send.model import (
    DEFAULT_DAILY,
    DEFAULT_HOURLY,
    Agent,
    Decision,
    Disposition,
    Policy,
    QueueRow,
    QueueState,
    RefusedRequest,
    SendRequest,
)
from envelopay.enforcer.send.policy import (
    allowlisted,
    check_request,
    check_sender,
    fingerprint,
    valid_address,
)
from envelopay.enforcer.send.refusals import Refused, send_summary
from envelopay.enforcer.send.store import EnforcerStore, QueueCursor
from envelopay.errors import StoreError, TransportError, UsageError
from envelopay.mail.transport import Envelope, Transport
from envelopay.protocol.headers import HeaderRefusal, read_headers

if TYPE_CHECKING:
    from envelopay.dkim import Signer  # the module loads cryptography: for types only

__all__ = ["KILLED", "Enforcer", "hash_token"]

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"@?{_LABEL}(?:\.{_LABEL})+")

# The reason recorded when the kill switch stopped a send right before delivery.
KILLED = "agent killed before delivery"


def _slots(now: float) -> tuple[str, str]:
    hour = time.strftime("%Y-%m-%dT%H", time.gmtime(now))
    return hour, hour[:10]


def hash_token(token: str) -> str:
    # Tokens are 256-bit random secrets, so an unsalted sha256 is enough to store them.
    return hashlib.sha256(token.encode()).hexdigest()


def _new_token() -> str:
    return "epa_" + secrets.token_urlsafe(32)


class Enforcer:
    def __init__(
        self,
        store: EnforcerStore,
        transport: Transport,
        *,
        operator_token_hash: str = "",
        signer: Signer | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        new_token: Callable[[], str] = _new_token,
        dedupe_window: float = 600.0,
        grace: float = 15.0,
        claim_timeout: float = 300.0,
    ) -> None:
        self.store = store
        self.transport = transport  # the outbound seam (envelopay.mail.transport)
        self.signer = signer
        self.clock = clock
        self.new_id = new_id
        self.new_token = new_token
        self.dedupe_window = dedupe_window
        self.grace = grace
        self.claim_timeout = claim_timeout  # a Message-ID claim with no record is stale after this
        self._operator_hash = operator_token_hash

    # -- identities ---------------------------------------------------------------------

    def is_operator(self, token: str | None) -> bool:
        if not token or not self._operator_hash:
            return False
        return hmac.compare_digest(hash_token(token), self._operator_hash)

    async def agent_for(self, token: str | None) -> Agent | None:
        if not token:
            return None
        return await self.store.agent_by_token(hash_token(token))

    # -- the send path ------------------------------------------------------------------

    async def send(self, token: str | None, raw: Mapping[str, Any]) -> Disposition:
        """Run the ordered checks and deliver, queue or refuse. Never raises for a verdict.

        Nothing is consumed by a refusal: the message is composed (exactly as it will be
        sent) before any claim or cap is taken; claims are released and cap slots given
        back when a later step refuses. An identified agent's refused request is kept for
        the activity page (`note_refusal`)."""
        checked = check_request(raw)  # 1-2: shape, headers, content: no I/O yet
        if isinstance(checked, Disposition):
            await self.note_refusal(token, "send", "send", send_summary(raw), checked)
            return checked
        req = checked
        try:
            agent = await self.agent_for(token)  # 3: identity from the token only
        except StoreError as exc:
            return Disposition(status="failed", reason=f"store error: {exc}")
        if agent is None:
            return Disposition(status="blocked", reason="unknown agent")
        d = await self._send_as(agent, req)
        if d.status == "blocked" and d.id is None:  # refused outright: no send row says so
            await self.note_refusal(agent, "send", "send", send_summary(raw), d)
        return d

    async def note_refusal(
        self, who: Agent | str | None, side: Literal["send", "spend"], operation: str, summary: str,
        d: Refused,
    ) -> None:
        """Keep an identified agent's refused request (`who`: the agent, or the token it
        gave); an unknown token is not an agent's request and is not kept. A store that
        cannot keep it changes nothing of the answer."""
        try:
            agent = who if isinstance(who, Agent) else await self.agent_for(who)
            if agent is None:
                return
            await self.store.record_refusal(RefusedRequest(
                id=self.new_id(), agent_id=agent.id, side=side, operation=operation,
                code=d.code or "invalid_request", reason=d.reason, summary=summary, created_at=self.clock(),
            ))
        except StoreError:
            return

    async def _send_as(self, agent: Agent, req: SendRequest) -> Disposition:
        if agent.killed:
            return Disposition(status="blocked", reason="killed", code="killed")
        refused = check_sender(req, agent)  # 4: sender pin
        if refused is not None:
            return refused
        now = self.clock()
        send_id = self.new_id()
        message_id = self._message_id(agent, req)
        composed = self.compose(agent, req, message_id, now)  # what compose accepts, before any cap
        if isinstance(composed, str):
            return Disposition(status="blocked", reason=f"invalid message: {composed}", code="not_composable")
        fp = fingerprint(req)
        held: list[tuple[str, str]] = []  # claims taken, released if this send goes no further
        try:
            if req.message_id is not None:
                # Idempotent resend of a fixed Message-ID (an outbox retry): answer from the
                # record. A FAILED attempt is not a send, so it may be tried again.
                answered = await self._claim_message_id(agent, req.message_id, send_id, now)
                if answered is not None:
                    return answered
                held.append(("msgid", req.message_id))
            # Duplicate/loop guard: counts successful (and in-flight) sends only.
            if await self.store.recent_success(agent.id, fp, now - self.dedupe_window) or not (
                await self.store.claim(agent.id, "fp", fp, send_id, now, now - self.dedupe_window)
            ):
                await self._release(agent, held, send_id)
                return Disposition(status="blocked", reason="duplicate of a recent send", code="duplicate")
            held.append(("fp", fp))
            if not allowlisted(req.to, agent.policy.allow):  # 5: a miss is flagged, consumes nothing
                await self._release(agent, [("fp", fp)], send_id)
                why = "recipient not on the allowlist"
                return await self._queue(agent, req, fp, why, now, send_id, message_id)
            flagged = await self._take_caps(agent, now)  # 6: hourly then daily
        except StoreError as exc:
            await self._release(agent, held, send_id)
            return Disposition(status="failed", reason=f"store error: {exc}")
        if flagged:
            await self._release(agent, [("fp", fp)], send_id)
            return await self._queue(agent, req, fp, flagged, now, send_id, message_id)
        return await self._deliver_direct(agent, req, fp, now, send_id, message_id, composed)

    async def _claim_message_id(
        self, agent: Agent, message_id: str, send_id: str, now: float
    ) -> Disposition | None:
        """None when this send now holds the Message-ID; else the answer to give."""
        prior = await self.store.send_by_message_id(agent.id, message_id)
        if prior is not None and prior.state != "FAILED":
            return prior.disposition()
        if await self.store.claim(agent.id, "msgid", message_id, send_id, now, now - self.claim_timeout):
            return None
        holder = await self.store.claim_holder(agent.id, "msgid", message_id)
        row = await self.store.get_send(holder) if holder is not None else None
        if row is not None and row.state != "FAILED":
            return row.disposition()
        # Another executor holds it and has not recorded an outcome yet (or just failed).
        return Disposition(status="failed", reason="a send with this Message-ID is in flight; ask again",
                           code="in_flight")

    async def _release(self, agent: Agent, held: list[tuple[str, str]], send_id: str) -> None:
        for kind, key in held:
            # A claim left behind only delays a retry (stale after claim_timeout).
            with contextlib.suppress(StoreError):
                await self.store.release(agent.id, kind, key, send_id)

    def compose(self, agent: Agent, req: SendRequest, message_id: str, now: float) -> bytes | str:
        """The unsigned bytes to send, or why they cannot be composed. The one check of
        what compose accepts: the policy step calls it before any claim or cap, and
        execute calls it again (a queued row composes at its own time)."""
        try:
            raw = compose_request(
                req, message_id=message_id, date=datetime.fromtimestamp(now, UTC), agent_name=agent.name
            )
        # Agent input at a trust boundary: any of these is a refusal, never a 500.
        except (UsageError, ValueError, TypeError, RecursionError, OverflowError) as exc:
            return f"cannot compose: {exc}"[:300]
        # What leaves must be what every reader (parser, DKIM, garden) accepts.
        read = read_headers(raw)
        if isinstance(read, HeaderRefusal):
            return f"cannot compose: header block refused ({read.reason})"
        return raw

    async def _take_caps(self, agent: Agent, now: float) -> str:
        """"" when both slots were taken; otherwise the reason to flag. Each take is one
        conditional write; a daily refusal hands the hourly slot back."""
        p = agent.policy
        # A cap of zero or less flags before any counter is touched: never one free send.
        if p.hourly_cap <= 0:
            return "hourly cap is zero"
        if p.daily_cap <= 0:
            return "daily cap is zero"
        hour, day = _slots(now)
        if not await self.store.take_slot(agent.id, "h", hour, p.hourly_cap):
            return "hourly cap reached"
        try:
            daily_ok = await self.store.take_slot(agent.id, "d", day, p.daily_cap)
        except StoreError:
            await self.store.give_back(agent.id, "h", hour)
            raise
        if not daily_ok:
            await self.store.give_back(agent.id, "h", hour)
            return "daily cap reached"
        return ""

    async def _give_back_caps(self, agent: Agent, now: float) -> None:
        hour, day = _slots(now)
        with contextlib.suppress(StoreError):  # a slot not handed back errs on the side of sending less
            await self.store.give_back(agent.id, "h", hour)
            await self.store.give_back(agent.id, "d", day)

    def _message_id(self, agent: Agent, req: SendRequest | None = None) -> str:
        if req is not None and req.message_id is not None:
            return req.message_id
        return f"<{self.new_id()}@{agent.address.rsplit('@', 1)[1].lower()}>"

    async def _queue(
        self, agent: Agent, req: SendRequest, fp: str, reason: str, now: float, send_id: str, message_id: str
    ) -> Disposition:
        try:
            await self.store.insert_send(
                id=send_id, agent_id=agent.id, state="PENDING", reason=reason, request=req,
                fingerprint=fp, message_id=message_id, now=now,
            )
        except StoreError as exc:
            if req.message_id is not None:
                await self._release(agent, [("msgid", req.message_id)], send_id)
            return Disposition(status="failed", reason=f"store error: {exc}")
        return Disposition(status="pending_approval", reason=reason, approval_id=send_id, id=send_id)

    def sign(self, raw: bytes) -> bytes | str:
        """`raw` DKIM-signed (when this enforcer signs), or why signing refused it."""
        try:
            return raw if self.signer is None else self.signer(raw)
        except (UsageError, ValueError) as exc:
            return f"signing refused: {exc}"

    async def transmit(
        self, agent: Agent, req: SendRequest, raw: bytes, *, recheck_kill: bool = True,
        envelope: Envelope | None = None, signed: bool = False,
    ) -> str:
        """Sign (unless `signed`: _signed ran already), re-check the kill switch, deliver
        (through `envelope`, the transaction already opened for this sender and recipient,
        when there is one). Returns "" on success, KILLED when the kill switch was thrown
        meanwhile, or the failure reason."""
        if not signed:
            done = self.sign(raw)
            if isinstance(done, str):
                return done
            raw = done
        # Kill is re-checked here, the last step before delivery (DESIGN: "kill is
        # re-checked at execute"): a kill that commits while this send was between its
        # caps and here stops it.
        # (Not for the proof of a payment already committed: recheck_kill=False.)
        if recheck_kill:
            try:
                current = await self.store.agent_by_id(agent.id)
            except StoreError as exc:
                return f"store error before delivery: {exc}"
            if current is None or current.killed:
                return KILLED
        try:
            if envelope is not None and (envelope.sender, envelope.recipient) == (req.sender, req.to):
                await envelope.send_body(raw)
            else:
                await self.transport.send(raw, req.sender, req.to)
        except TransportError as exc:
            return f"delivery failed: {exc}"
        return ""

    async def _deliver_direct(
        self, agent: Agent, req: SendRequest, fp: str, now: float, send_id: str, message_id: str, raw: bytes
    ) -> Disposition:
        problem = await self.transmit(agent, req, raw)
        if problem == KILLED:
            await self._give_back_caps(agent, now)  # nothing was sent: the slots go back
        state: QueueState = "FAILED" if problem else "SENT"
        try:
            await self.store.insert_send(
                id=send_id, agent_id=agent.id, state=state, reason=problem, request=req,
                fingerprint=fp, message_id=message_id, now=self.clock(),
            )
        except StoreError as exc:
            if not problem:  # the mail left: say so, and that it went unrecorded
                return Disposition(status="sent", reason=f"sent; not recorded: {exc}", message_id=message_id)
            return Disposition(status="failed", reason=f"{problem}; store error: {exc}")
        if problem == KILLED:
            return Disposition(status="blocked", reason=problem, id=send_id, code="killed")
        if problem:
            return Disposition(status="failed", reason=problem, id=send_id, message_id=message_id)
        return Disposition(status="sent", message_id=message_id, id=send_id)

    async def status(self, token: str | None, send_id: str) -> Disposition:
        """The real state of one of the token's agent's sends; `unknown` for anyone else's."""
        try:
            agent = await self.agent_for(token)
            row = await self.store.get_send(send_id) if agent is not None and not agent.killed else None
        except StoreError as exc:
            return Disposition(status="failed", reason=f"store error: {exc}")
        if agent is None or row is None or row.agent_id != agent.id:
            return Disposition(status="unknown", id=send_id)
        return row.disposition()

    # -- operators ----------------------------------------------------------------------

    async def create_agent(
        self,
        name: str,
        address: str,
        *,
        allow: tuple[str, ...] = (),
        hourly: int = DEFAULT_HOURLY,
        daily: int = DEFAULT_DAILY,
    ) -> tuple[Agent, str]:
        """Create an agent and return it with its token (shown once; only the hash is kept)."""
        if not _NAME.fullmatch(name):
            raise UsageError("agent name: 1-64 of a-z 0-9 _ - (starting with a letter or digit)")
        if not valid_address(address):
            raise UsageError(f"not a single bare address: {address!r}")
        for entry in allow:
            if not (valid_address(entry) or _DOMAIN.fullmatch(entry)):
                raise UsageError(f"allowlist entry is neither an address nor a domain: {entry!r}")
        agent = Agent(
            id=self.new_id(), name=name, address=address, status="ACTIVE",
            policy=Policy(hourly_cap=hourly, daily_cap=daily, allow=tuple(allow)),
        )
        token = self.new_token()
        if not await self.store.create_agent(agent, hash_token(token), self.clock()):
            raise UsageError(f"agent {name!r} already exists")
        return agent, token

    async def list_agents(self, limit: int = 1000, after: str | None = None) -> list[Agent]:
        return await self.store.list_agents(limit, after)

    async def agents_page(self, limit: int, after: str | None = None) -> tuple[list[Agent], str | None]:
        """One page of agents by name and the `after` of the next page (None: the last page)."""
        rows = await self.store.list_agents(limit + 1, after)
        return rows[:limit], (rows[limit - 1].name if len(rows) > limit else None)

    async def kill_agent(self, name: str) -> Agent | None:
        """Terminal: nothing in envelopay writes ACTIVE back."""
        return await self.store.kill_agent(name)

    async def list_approvals(self, limit: int = 200) -> list[QueueRow]:
        return await self.store.list_sends(limit)

    async def approvals_page(self, limit: int, after: str | None = None) -> tuple[list[QueueRow], str | None]:
        """One page of the queue (pending first) and the token of the next (None: the last
        page). A token that is not one this wrote is a UsageError."""
        cursor = None
        if after is not None:
            cursor = QueueCursor.parse(after)
            if cursor is None:
                raise UsageError(f"not a queue page token: {after!r}")
        rows = await self.store.list_sends(limit + 1, cursor)
        more = len(rows) > limit
        return rows[:limit], (QueueCursor.of(rows[limit - 1]).token() if more else None)

    async def _observed(self, send_id: str) -> str:
        row = await self.store.get_send(send_id)
        return row.state if row is not None else "MISSING"

    async def approve(self, send_id: str, by: str = "operator") -> Decision:
        """PENDING → APPROVED (one conditional UPDATE), then execute. Kill beats approval."""
        row = await self.store.get_send(send_id)
        if row is None:
            return Decision(ok=False, state="MISSING", detail="no such approval")
        agent = await self.store.agent_by_id(row.agent_id)
        if agent is None or agent.killed:
            return Decision(ok=False, state=row.state, detail="agent is killed: approval refused")
        if not await self.store.approve(send_id, by, self.clock()):
            observed = await self._observed(send_id)
            detail = "agent is killed: approval refused" if observed == "PENDING" else "not pending"
            return Decision(ok=False, state=observed, detail=detail)
        return await self.execute(send_id)

    async def reject(
        self, send_id: str, by: str = "operator", reason: str = "rejected by operator"
    ) -> Decision:
        if not await self.store.reject(send_id, by, reason, self.clock()):
            observed = await self._observed(send_id)
            return Decision(ok=False, state=observed, detail="not pending")
        return Decision(ok=True, state="REJECTED", disposition=Disposition(status="blocked", reason=reason,
                                                                           id=send_id, state="rejected"))

    async def retry(self, send_id: str) -> Decision:
        """Re-execute an APPROVED row stranded by a crash. A row approved less than `grace`
        seconds ago is presumed to have a live executor and gets a conflict instead."""
        now = self.clock()
        if not await self.store.reclaim(send_id, now, now - self.grace):
            observed = await self._observed(send_id)
            detail = (
                f"approved less than {self.grace:g}s ago: executor presumed live"
                if observed == "APPROVED" else "not approved"
            )
            return Decision(ok=False, state=observed, detail=detail)
        return await self.execute(send_id)

    async def execute(self, send_id: str) -> Decision:
        """Deliver an APPROVED row. Re-checks the kill switch; consults the outcome record so
        a re-execution after a crash does not send again once the outcome was written."""
        row = await self.store.get_send(send_id)
        if row is None or row.state != "APPROVED":
            return Decision(ok=False, state=row.state if row else "MISSING", detail="not approved")
        agent = await self.store.agent_by_id(row.agent_id)
        now = self.clock()
        outcome = await self.store.get_outcome(send_id)
        if outcome is not None:
            state, message_id, detail = outcome
        elif agent is None or agent.killed:
            # An operator's approval must not outrun a kill.
            state, message_id, detail = "FAILED", None, "agent killed before execution"
            await self.store.put_outcome(send_id, state, message_id, detail, now)
        else:
            message_id = row.message_id or self._message_id(agent)
            composed = self.compose(agent, row.request, message_id, now)
            if isinstance(composed, str):
                # Terminal, with its reason: an approved row that cannot compose ends
                # FAILED, never stuck APPROVED.
                state, detail = "FAILED", composed
            else:
                problem = await self.transmit(agent, row.request, composed)
                state, detail = ("FAILED", problem) if problem else ("SENT", row.reason)
            await self.store.put_outcome(send_id, state, message_id, detail, self.clock())
        final: QueueState = "SENT" if state == "SENT" else "FAILED"
        if not await self.store.finish(send_id, final, message_id, detail, self.clock()):
            observed = await self._observed(send_id)
            return Decision(ok=False, state=observed, detail="finished by another executor")
        done = await self.store.get_send(send_id)
        assert done is not None
        return Decision(ok=final == "SENT", state=final, detail=detail, disposition=done.disposition())
