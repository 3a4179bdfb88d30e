"""envelopay.enforcer: the send enforcer (issue 7), in rooms (docs/DESIGN.md): send/,
spend/, service/, client/ and what both sides share in common/.

Per-agent identities from tokens, the ordered policy checks, race-free caps, the approval
queue and the kill switch (`send.enforcer.Enforcer`), on SQLite or PostgreSQL
(`send.store`, `send.backends`), served over HTTP/JSON with an operator console
(`service.server`), reached through `client.http_client.EnforcerClient` (the engine
outbox's send hook) and the agents' MCP front (`client.mcp_server`). The names below are
the public API, re-exported from their rooms.
"""

from envelopay.enforcer.client.http_client import EnforcerClient, OperatorClient, request_from_outbound
from envelopay.enforcer.send.backends import PostgresStore, SqliteStore, open_store
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.model import Agent, Decision, Disposition, Policy, QueueRow, SendRequest
from envelopay.enforcer.send.store import EnforcerStore

__all__ = [
    "Agent",
    "Decision",
    "Disposition",
    "Enforcer",
    "EnforcerClient",
    "EnforcerStore",
    "OperatorClient",
    "Policy",
    "PostgresStore",
    "QueueRow",
    "SendRequest",
    "SqliteStore",
    "open_store",
    "request_from_outbound",
]
