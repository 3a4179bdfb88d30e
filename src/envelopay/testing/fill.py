"""Bulk fill of a ledger through its own schema, for plan checks and the growth benchmark.

Rows go in with one `INSERT ... SELECT` per table over a number series (SQLite: a
recursive CTE; PostgreSQL: generate_series), inside the store's own write transaction,
into the tables `migrate()` made, so every index and constraint of the real schema is
maintained. Each flow is one ORDER as the seller sees it: the inbound ORDER (claim,
(sender, id) pair, spent proof, two Message-IDs, one ref), two log rows and the FULFILL
reply in the outbox, and one answered call. The last `pending` fraction of outbox rows
is a backlog still to send.
"""

from __future__ import annotations

from typing import Literal

from envelopay.ledger._sql import SqlStore

__all__ = ["LOCAL", "fill_ledger"]

LOCAL = "seller@fill.test"
_EPOCH = 1767225600  # 2026-01-01T00:00:00Z; flow i is one second after flow i-1

_FULFILL = '{"type":"fulfill","id":"ful-1","order_ref":"ord-1","result":{"text":"' + "r" * 200 + '"}}'
_BODY = (
    '{"amount":"1.00","asset":"USDC","chain":"solana","note":"fill","proof":'
    '{"signature":"5' + "x" * 86 + '"},"items":[{"sku":"widget","qty":1}]}'
)

# (table, columns, select list); {T}(expr) is a time `expr` seconds after the epoch,
# {J<}..{J>} casts a text expression to the JSON column type, {i} is the flow number.
_TABLES: tuple[tuple[str, str, str], ...] = (
    (
        "ep_flows",
        "flow_id, local, peer, kind, side, state, version, data, created_at, updated_at",
        "'f' || {i}, '{L}', 'buyer' || ({i} % 1000) || '@fill.test', 'order', 'seller', 'fulfilled', 2,"
        " {J<}'{\"amount\":\"1.00\",\"asset\":\"USDC\",\"order\":\"o' || {i} || '\"}'{J>},"
        " {T}({i}), {T}({i})",
    ),
    (
        "ep_inbound",
        "local, message_id, content_hash, status, worker, lease_until, outcome, flow_id, created_at, done_at",
        "'{L}', '<in' || {i} || '@fill.test>', '{H}', 'done', 'w1', {T}({i}),"
        " {J<}'{\"status\":\"processed\",\"flow_id\":\"f' || {i} || '\","
        "\"outbox\":[\"<out' || {i} || '@fill.test>\"]}'{J>},"
        " 'f' || {i}, {T}({i}), {T}({i})",
    ),
    (
        "ep_replay",
        "local, sender, protocol_id, content_hash, owner, status, outcome, created_at",
        "'{L}', 'buyer' || ({i} % 1000) || '@fill.test', 'p' || {i}, '{H}', '<in' || {i} || '@fill.test>',"
        " 'done', {J<}'{\"status\":\"processed\",\"outbox\":[\"<out' || {i} || '@fill.test>\"]}'{J>},"
        " {T}({i})",
    ),
    (
        "ep_proofs",
        "chain, proof_key, owner_local, owner_message, status, verdict, created_at, spent_at",
        "'solana', 'k' || {i}, '{L}', '<in' || {i} || '@fill.test>', 'spent',"
        " NULL, {T}({i}), {T}({i})",
    ),
    (
        "ep_flow_refs",
        "local, peer, author, protocol_id, flow_id",
        "'{L}', 'buyer' || ({i} % 1000) || '@fill.test', '{L}', 'o' || {i}, 'f' || {i}",
    ),
    ("ep_flow_msgids", "local, message_id, flow_id", "'{L}', '<in' || {i} || '@fill.test>', 'f' || {i}"),
    ("ep_flow_msgids", "local, message_id, flow_id", "'{L}', '<out' || {i} || '@fill.test>', 'f' || {i}"),
    (
        "ep_log",
        "flow_id, at, direction, type, message_id, protocol_id, sender, recipient, body, verdict, oops",
        "'f' || {i}, {T}({i}), 'in', 'order', '<in' || {i} || '@fill.test>', 'p' || {i},"
        " 'buyer' || ({i} % 1000) || '@fill.test', '{L}', {J<}'{B}'{J>}, NULL, NULL",
    ),
    (
        "ep_log",
        "flow_id, at, direction, type, message_id, protocol_id, sender, recipient, body, verdict, oops",
        "'f' || {i}, {T}({i}), 'out', 'fulfill', '<out' || {i} || '@fill.test>', 'o' || {i}, '{L}',"
        " 'buyer' || ({i} % 1000) || '@fill.test', {J<}'{B}'{J>}, NULL, NULL",
    ),
    (
        "ep_outbox",
        "message_id, flow_id, sender, recipient, type, body, date, in_reply_to, refs, note, status,"
        " attempts, created_at, next_attempt, sent_at, last_error",
        "'<out' || {i} || '@fill.test>', 'f' || {i}, '{L}', 'buyer' || ({i} % 1000) || '@fill.test',"
        " 'fulfill', {J<}'{F}'{J>}, {T}({i}), '<in' || {i} || '@fill.test>', {J<}'[]'{J>}, NULL,"
        " CASE WHEN {i} > {P} THEN 'pending' ELSE 'sent' END, CASE WHEN {i} > {P} THEN 0 ELSE 1 END,"
        " {T}({i}), NULL, CASE WHEN {i} > {P} THEN NULL ELSE {T}({i}) END, NULL",
    ),
    (
        "ep_calls",
        "call_id, local, peer, message_id, deadline, status, request, result, created_at, resolved_at",
        "'c' || {i}, '{L}', 'buyer' || ({i} % 1000) || '@fill.test', '<call' || {i} || '@fill.test>',"
        " {T}({i}), 'answered', {J<}'{}'{J>}, {J<}'{}'{J>}, {T}({i}), {T}({i})",
    ),
)


def _dialect(store: SqlStore) -> Literal["sqlite", "postgres"]:
    return "postgres" if type(store).__name__ == "PostgresStore" else "sqlite"


def fill_ledger(store: SqlStore, flows: int, *, pending: float = 0.0, start: int = 1) -> None:
    """Add flows `start` .. `start + flows - 1` to a migrated ledger (see the module doc)."""
    dialect = _dialect(store)
    last = start + flows - 1
    backlog_from = last - int(flows * pending)
    if dialect == "sqlite":
        series = f"WITH RECURSIVE n(i) AS (SELECT {start} UNION ALL SELECT i + 1 FROM n WHERE i < {last})"
        source, json_cast = "FROM n", ""

        def time(expr: str) -> str:
            return f"(strftime('%Y-%m-%dT%H:%M:%S', {_EPOCH} + {expr}, 'unixepoch') || '.000000+00:00')"
    else:
        series, source, json_cast = "", f"FROM generate_series({start}, {last}) AS n(i)", "::jsonb"

        def time(expr: str) -> str:
            return f"to_timestamp({_EPOCH} + {expr})"

    with store.write() as x:
        for table, cols, select in _TABLES:
            expr = (
                select.replace("{J<}", "(")
                .replace("{J>}", ")" + json_cast)
                .replace("{L}", LOCAL)
                .replace("{H}", "a" * 64)
                .replace("{B}", _BODY)
                .replace("{F}", _FULFILL)
                .replace("{P}", str(backlog_from))
                .replace("{i}", "n.i")
            )
            while "{T}(" in expr:  # {T}(n.i) -> the dialect's time expression
                head, _, tail = expr.partition("{T}(")
                arg, _, rest = tail.partition(")")
                expr = head + time(arg) + rest
            if dialect == "postgres":
                expr = expr.replace("%", "%%")  # the modulo, not a placeholder
            x.exec(f"{series} INSERT INTO {table} ({cols}) SELECT {expr} {source}".strip())
