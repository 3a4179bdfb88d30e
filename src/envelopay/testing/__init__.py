"""envelopay.testing: public check kits any implementation can run against its own parts.

- `check_rail(factory)`: a payment rail (envelopay.testing.rails);
- `check_store(factory)`: a ledger Store (envelopay.testing.store);
- `check_send_store(factory)`: the enforcer's send store (envelopay.testing.send_store);
- `check_payment_store(factory)`: the enforcer's spend store (envelopay.testing.payment_store);
- `check_mailbox_store(factory)`: the agent mailbox index (envelopay.testing.mailbox_store);
- `check_refund_book(factory)`: the ledger's refunds table, each refund paid at most
  once, one owner at a time (envelopay.testing.refunds);
- `check_summaries(factory)`: a ledger's read-only summaries, what the worker's console
  reads (envelopay.testing.summaries);
- `MockTransport`: the outbound seam's stand-in — records what was sent, refuses a
  recipient for good or fails for now on request (envelopay.mail.transport.mock);
- `envelopay.testing.node_faults`: wrappers that make a JSON-RPC dev node hang up after a
  call or fail its first ones (what a payer must survive without paying twice);
- `DictRail`, `WorkerApp`: the rails mock kit — a rail whose verdicts a test chooses, and
  the paid worker an engine test talks to (envelopay.testing.mock_rail, with the messages
  such a test sends; envelopay.testing.mock_worker).

Each is loaded when first named, so importing one kit (or `testing.conformance`) does not
load the others' stores.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DictRail",
    "MockTransport",
    "WorkerApp",
    "check_mailbox_store",
    "check_payment_store",
    "check_rail",
    "check_refund_book",
    "check_send_store",
    "check_store",
    "check_summaries",
]

_HOME = {
    "check_rail": "envelopay.testing.rails",
    "check_store": "envelopay.testing.store",
    "check_send_store": "envelopay.testing.send_store",
    "check_payment_store": "envelopay.testing.payment_store",
    "check_mailbox_store": "envelopay.testing.mailbox_store",
    "check_summaries": "envelopay.testing.summaries",
    "check_refund_book": "envelopay.testing.refunds",
    "MockTransport": "envelopay.mail.transport.mock",
    "DictRail": "envelopay.testing.mock_rail",
    "WorkerApp": "envelopay.testing.mock_worker",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'envelopay.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
