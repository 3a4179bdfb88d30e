"""The index's rows as records, and the SQL of `check` (pure).

Order: the index keeps a message's `ts` non-decreasing in `seq`, and the full-text rowid
is `-seq` (`MailIndex.add` and `refile` hold both), so walking the full-text index by
rowid ascending is walking by date, newest first, and `ORDER BY f.rowid LIMIT n` is the
same answer as `ORDER BY ts DESC, seq DESC LIMIT n` over every match. That is what lets
every text filter stop at its limit instead of sorting its matches; and FTS5 starts an
ascending walk at the head of each segment's posting list, where a descending one must
first find its end in every segment (index v5; bench/RESULTS.md, growth).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import Any

from envelopay.mail.mailbox.fts import Expand, cheapest, fold, join, nfc, words_terms
from envelopay.mail.mailbox.records import Attachment, CheckFilter, MailRecord

__all__ = ["COLS", "check_query", "record"]

COLS = (
    "id, folder, name, file, message_id, from_addr, from_lc, to_addrs, cc_addrs, subject, subject_lc, ts,"
    " header_date, in_reply_to, refs, reply_to, body_head, body_len, attachments, read, status, problems,"
    " protocol_type, thread"
)


def record(row: sqlite3.Row, truncate: int = 0) -> MailRecord:
    body: str = row["body_head"]
    complete = int(row["body_len"]) <= len(body)
    if truncate == 0 or len(body) <= truncate:
        preview = body if complete or truncate == 0 else body + "…"
    else:
        preview = body[:truncate] + "…"
    return MailRecord(
        id=row["id"],
        folder=row["folder"],
        message_id=row["message_id"],
        from_addr=row["from_addr"],
        to_addrs=tuple(json.loads(row["to_addrs"])),
        cc_addrs=tuple(json.loads(row["cc_addrs"])),
        subject=row["subject"],
        date=datetime.fromtimestamp(row["ts"], UTC),
        header_date=row["header_date"],
        in_reply_to=row["in_reply_to"],
        references=tuple(json.loads(row["refs"])),
        reply_to=row["reply_to"],
        body=body,
        attachments=tuple(Attachment(**a) for a in json.loads(row["attachments"])),
        read=bool(row["read"]),
        status=row["status"],
        problems=tuple(json.loads(row["problems"])),
        protocol_type=row["protocol_type"],
        preview=preview,
        body_complete=complete,
    )


def check_query(folder: str, flt: CheckFilter, expand: Expand | None = None) -> tuple[str, list[Any]]:
    """The SQL of `check`: rows in order, each filter tested exactly in SQL (`ws`, the
    word-start test of envelopay.mail.mailbox.fts, and `wsz` on the kept text), so the
    limit is SQL's; only a `--contains` row whose text the index does not keep (past
    TEXT_CAP) comes back unconfirmed (`exact` = 0) for the caller to test on its file,
    and the caller applies the limit then.

    With a text filter the full-text index drives, newest first by rowid (see the module
    docstring), on the terms `narrow` keeps of every filter (a prefix expanded by
    `expand` into the tokens it covers streams too); without one, the (folder, ts) index
    does. Driving on the cheapest terms with SQL's exact test for the rest measured
    faster than letting FTS5 intersect every filter's column-limited terms newest first
    (bench/RESULTS.md, growth, run 7)."""
    terms = join(
        cheapest(
            [
                # in NFC: Python splits words at a combining mark, SQLite's tokenizer does not
                *(words_terms(nfc(flt.from_), "from_addr") if flt.from_ else []),
                *(words_terms(nfc(flt.subject), "subject") if flt.subject else []),
                *(words_terms(nfc(flt.contains), "{subject body}") if flt.contains else []),
            ],
            expand,
        )
    )
    direction = "DESC" if flt.sort == "newest" else "ASC"
    exact = "1"
    if flt.contains:
        exact = "(t.z IS NOT NULL OR m.body_len <= length(m.body_head))"
    head = f"SELECT m.*, {exact} AS exact FROM "
    if terms:
        sql = [
            head + "messages_fts f JOIN messages m ON m.seq = -f.rowid"
            " LEFT JOIN texts t ON t.seq = m.seq WHERE messages_fts MATCH ? AND m.folder = ?"
        ]
        args: list[Any] = [terms, folder]
        order = f"ORDER BY f.rowid {'ASC' if flt.sort == 'newest' else 'DESC'}"  # rowid = -seq
    else:
        sql = [head + "messages m LEFT JOIN texts t ON t.seq = m.seq WHERE m.folder = ?"]
        args = [folder]
        order = f"ORDER BY m.ts {direction}, m.seq {direction}"
    # The tests in C first, every one of them, then the word-start tests (a Python call
    # each, about 3 µs): SQLite evaluates them in this order, and with a selective filter
    # most candidates fail an instr (bench/RESULTS.md, growth).
    filters = (("from_lc", flt.from_), ("subject_lc", flt.subject))
    headers = [(col, fold(value)) for col, value in filters if value]
    for col, needle in headers:
        sql.append(f"AND instr(m.{col}, ?) > 0")
        args.append(needle)
    if flt.after is not None:
        sql.append("AND m.ts > ?")
        args.append(flt.after.timestamp())
    if flt.before is not None:
        sql.append("AND m.ts < ?")
        args.append(flt.before.timestamp())
    if flt.unread_only:
        sql.append("AND m.read = 0")
    if flt.has_attachments is not None:
        sql.append("AND m.attachments " + ("!= '[]'" if flt.has_attachments else "= '[]'"))
    for col, needle in headers:
        sql.append(f"AND ws(?, m.{col})")
        args.append(needle)
    if flt.contains:
        sql.append(
            "AND (ws(?, m.subject_lc) OR ws(?, m.body_head)"
            " OR (m.body_len > length(m.body_head) AND (t.z IS NULL OR wsz(?, m.body_head, t.z))))"
        )
        args += [fold(flt.contains)] * 3
    sql.append(order)
    if not flt.contains:
        sql.append("LIMIT ?")
        args.append(flt.n)
    return " ".join(sql), args
