"""Keep, as it happens, what a flow's evidence folder needs and the ledger's flow log does
not hold (ledger/evidence.py): the raw bytes of each mail received into a flow and of each
mail sent, and every DKIM key record as it was seen when a signature was checked.

Three taps the node wires: the DKIM key lookup (`keeping_keys`), the send hook
(`keeping_sent`: the bytes exactly as handed to the transport, signature included) and
the received mail with its outcome (`keep_received`). Keeping is never allowed to cost a
message its handling: a store error here is logged and the mail goes on (the evidence
for that mail is then missing, which `evidence verify` reports).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from envelopay.dkim.lookup import DnsLookup
from envelopay.engine import Outcome
from envelopay.engine.outbox import DirectHook
from envelopay.errors import EnvelopayError
from envelopay.ledger.evidence import EvidenceLog, evidence_log
from envelopay.protocol.outbound import Outbound

__all__ = ["keep_evidence", "keep_own_key", "keep_received", "keeping_keys", "keeping_sent"]

Clock = Callable[[], datetime]
_log = logging.getLogger(__name__)


class _Node(Protocol):
    """What of an AgentNode the taps wire (node/agent_node.py builds it; no import back)."""

    @property
    def store(self) -> Any: ...

    dns: DnsLookup | None
    drainer: Any
    evidence: EvidenceLog | None


def _quietly(what: str, act: Callable[[], None]) -> None:
    try:
        act()
    except EnvelopayError:
        _log.exception("evidence: could not keep %s", what)


def keeping_keys(dns: DnsLookup, log: EvidenceLog, clock: Clock = lambda: datetime.now(UTC)) -> DnsLookup:
    """The same lookup, each record it answers kept with the time it was first seen."""

    async def lookup(name: str) -> str | None:
        record = await dns(name)
        if record is not None:
            _quietly(f"the key at {name}", lambda: log.keep_key(name, record, "dns", clock()))
        return record

    return lookup


def keep_own_key(log: EvidenceLog, signer: object, clock: Clock = lambda: datetime.now(UTC)) -> None:
    """Our own public key as the record a verifier finds (a signer with a DkimKey)."""
    key, selector, domain = (getattr(signer, n, None) for n in ("key", "selector", "domain"))
    txt = getattr(key, "dns_txt_record", None)
    if txt is None or not isinstance(selector, str) or not isinstance(domain, str):
        return
    name = f"{selector}._domainkey.{domain}"
    _quietly(f"our key at {name}", lambda: log.keep_key(name, str(txt()), "signer", clock()))


def keep_received(log: EvidenceLog, local: str, raw: bytes, outcome: Outcome, now: datetime) -> None:
    """A received mail that joined a flow, its bytes as they arrived."""
    if outcome.flow_id is None or outcome.message_id is None or outcome.status in ("busy", "deferred"):
        return
    mid = outcome.message_id
    _quietly(f"received {mid}", lambda: log.keep_mail(local, mid, "in", raw, now))


def keeping_sent(
    log: EvidenceLog, clock: Clock = lambda: datetime.now(UTC)
) -> Callable[[Outbound, bytes], None]:
    """The send hook's tap (DirectHook.kept): each mail the transport took, byte for byte,
    under its sender and the row's Message-ID."""

    def kept(out: Outbound, signed: bytes) -> None:
        mid = out.message_id
        _quietly(f"sent {mid}", lambda: log.keep_mail(out.sender, mid, "out", signed, clock()))

    return kept


def keep_evidence(node: _Node) -> None:
    """Wire the three taps into a node built over a ledger of ours (SQLite, PostgreSQL).
    Mail sent through the enforcer is signed and sent there: its bytes are not kept here."""
    log = evidence_log(node.store)
    if log is None:
        return
    node.evidence = log
    if node.dns is not None:
        node.dns = keeping_keys(node.dns, log)
    hook = node.drainer.hook
    if isinstance(hook, DirectHook):
        hook.kept = keeping_sent(log)
        if hook.signer is not None:
            keep_own_key(log, hook.signer)
