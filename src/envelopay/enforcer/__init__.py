"""envelopay.enforcer: the send enforcer (issue 7).

Per-agent identities from tokens, the ordered policy checks, race-free caps, the approval
queue and the kill switch (`core.Enforcer`), on SQLite or PostgreSQL (`store`), served over
HTTP/JSON with an operator console (`server`), reached through `client.EnforcerClient`
(the engine outbox's send hook) and the agents' MCP front (`mcp_server`).
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
