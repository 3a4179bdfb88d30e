"""The error tree. Exceptions mean a bug or a broken transport, never someone else's
bad input (that is a value: a Parsed with problems, a Verdict, a disposition)::

    EnvelopayError
    ├── ConfigError        bad local configuration (CLI exit 3, the environment)
    ├── UsageError         a caller passed something invalid (CLI exit 2)
    ├── TransportError     SMTP / IMAP / LMTP / RPC unreachable or broken
    ├── StoreError         the ledger failed (not a constraint we asked about)
    ├── RailError          a rail could not carry out a payment
    └── Refused            the peer has not agreed to what we were about to pay (CLI exit 1)

The CLI's exit code for each kind is one table: envelopay.cli.output.EXIT_CODES.
"""

from __future__ import annotations

from typing import Any


class EnvelopayError(Exception):
    """Base of every exception raised on purpose by envelopay."""


class ConfigError(EnvelopayError):
    """Local configuration is missing or invalid."""


class UsageError(EnvelopayError):
    """A caller passed an invalid argument (refused before any I/O)."""


class TransportError(EnvelopayError):
    """A mail or RPC transport is unreachable or broke mid-way."""


class StoreError(EnvelopayError):
    """The ledger failed for a reason other than a condition we asked it to check."""


class RailError(EnvelopayError):
    """A rail could not make a payment (e.g. insufficient funds, RPC down)."""

    def __init__(self, reason: str, detail: str = "", *, sent: dict[str, Any] | None = None) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        # The proof of a transaction the chain was handed and may still take (no
        # confirmation in time, the node gone after the send): not a payment that failed,
        # and never a reason to pay again. None: nothing left.
        self.sent = sent

    def may_land(self) -> str | None:
        """What a person is told when the transaction left (`sent`); None when nothing did."""
        if self.sent is None:
            return None
        return (f"transaction {self.sent.get('tx')} was handed to the chain and may still land "
                f"({self.detail or self.reason}); it is not a failed payment: do not pay again")


class Refused(EnvelopayError):
    """The peer has not said it takes what we were about to pay for; nothing was paid."""
