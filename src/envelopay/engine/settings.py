"""What one mailbox's engine is set up with, shared by its parts.

The engine is composed, not inherited (issue 28 item 3): the refusals, the status desk,
the sender and the action driver are collaborators that each hold this one record, so a
setting changed on the engine after it is built (`Engine.rails = …`, `Engine.parser = …`)
is what every part reads. Ids are minted here too, so every part names its
messages the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from envelopay.engine.application import Application
from envelopay.ledger.store import AnswerLimits, Store
from envelopay.protocol.parsed import Parsed
from envelopay.rails.finality import WaitPolicy
from envelopay.rails.interface import Rail

__all__ = ["DkimPolicy", "EngineSettings", "ProofBinding"]

DkimPolicy = Literal["required", "prefer", "off"]
ProofBinding = Literal["required", "solicited"]


@dataclass(slots=True, kw_only=True)
class EngineSettings:
    """Mutable on purpose: `Engine.rails = …` and `Engine.parser = …` write through."""

    store: Store
    address: str
    domain: str
    rails: dict[str, Rail]
    app: Application
    dkim_policy: DkimPolicy
    clock: Callable[[], datetime]
    id_factory: Callable[[], str]
    # A restarted worker keeps its id so it may redo its own claims at once; another
    # worker waits for the lease to run out.
    worker_id: str
    lease: timedelta
    parser: Callable[[bytes], Parsed]
    # A person's `Re:` reply in a thread we started, read again (SPEC.md "Replies in our
    # thread"); by default the mailbox's own parse options with that reading on.
    reply_parser: Callable[[bytes], Parsed]
    proof_window: timedelta | None
    invoice_skew: timedelta | None
    wait: WaitPolicy | None  # None: a pending/unavailable proof is refused at once
    proof_binding: ProofBinding
    # Automatic answers per peer and per thread (None: no limit; RFC 3834 still holds).
    answer_limits: AnswerLimits | None
    # The extensions the mailbox's parser reads, taken when the engine is built (before
    # anyone replaces the parser): `status` makes it tell and ask (engine/status.py).
    extensions: frozenset[str]

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.id_factory()}"

    def new_message_id(self) -> str:
        return f"<{self.id_factory()}@{self.domain}>"

    def wallet(self, chain: str, token: str) -> str | None:
        """Our receiving wallet for an asset (the application's), or None."""
        return self.app.wallet(chain, token)
