"""Deprecated: `envelopay.agent` was split into rooms, one per role.

    envelopay.agent.engine, outbox, transport     → envelopay.engine (inbound, send, outbox, transport)
    envelopay.agent.worker, tasks, operations,
        counterpay                                → envelopay.worker (app, tasks, operations, counterpay)
    envelopay.agent.toolmail, responders, calls   → envelopay.endpoints (+ reference: kv@)
    envelopay.agent.node, runtime, keys, init,
        serve                                     → envelopay.node (wiring, transports, runtime, …)
    envelopay.agent.config                        → envelopay.config
    envelopay.agent.client, demo, live_conformance → envelopay.client (buyer, demo, live_conformance)

Each old module re-exports its names for one release and warns on import.
"""

from __future__ import annotations

import warnings

warnings.warn(
    "envelopay.agent is deprecated; its modules moved to envelopay.engine, envelopay.worker, "
    "envelopay.endpoints, envelopay.node, envelopay.client and envelopay.config",
    DeprecationWarning,
    stacklevel=2,
)
