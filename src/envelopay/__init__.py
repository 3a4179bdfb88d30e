"""envelopay: the reference implementation of the Envelopay protocol.

The top level re-exports the pure, light layers: the protocol (parse, compose, the
nine message models, OOPS codes), the rail contract (Expectation, Verdict, Rail) and
the error tree. I/O layers are imported from their own modules so that importing
`envelopay` never pulls in a database driver, a mail library or a chain library:

    envelopay.engine         Engine, BaseApplication
    envelopay.ledger.sqlite  SqliteStore        envelopay.ledger.postgres  PostgresStore
    envelopay.rails.registry load_rails, make   envelopay.dkim             sign, verify
    envelopay.enforcer       EnforcerClient     envelopay.mail.garden      GardenServer

The public API is exactly `__all__`; a test pins it.
"""

from __future__ import annotations

from envelopay.errors import (
    ConfigError,
    EnvelopayError,
    RailError,
    StoreError,
    TransportError,
    UsageError,
)
from envelopay.protocol import (
    Accept,
    Fulfill,
    Invoice,
    Message,
    MessageType,
    Methods,
    Offer,
    Oops,
    OopsCode,
    Order,
    Outbound,
    Parsed,
    ParseOptions,
    Pay,
    Which,
    compose,
    compose_message,
    make_oops,
    parse,
)
from envelopay.rails.interface import Expectation, Rail, Reason, Verdict

__version__ = "0.1.0"

__all__ = [
    "Accept",
    "ConfigError",
    "EnvelopayError",
    "Expectation",
    "Fulfill",
    "Invoice",
    "Message",
    "MessageType",
    "Methods",
    "Offer",
    "Oops",
    "OopsCode",
    "Order",
    "Outbound",
    "ParseOptions",
    "Parsed",
    "Pay",
    "Rail",
    "RailError",
    "Reason",
    "StoreError",
    "TransportError",
    "UsageError",
    "Verdict",
    "Which",
    "__version__",
    "compose",
    "compose_message",
    "make_oops",
    "parse",
]
