"""Threads (pure): which messages belong together, and what a reply carries to continue one.

Messages join one thread when they share any Message-ID among their own Message-ID,
In-Reply-To and References (union-find over Message-IDs). A reply goes to Reply-To or
From (the recipient, when replying to our own sent mail); reply-all adds To and Cc
minus ourselves and the main recipient.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from envelopay.mail.mailbox.inputs import single_address
from envelopay.mail.mailbox.records import MailRecord
from envelopay.protocol.compose import reply_headers
from envelopay.protocol.parsed import Parsed

__all__ = [
    "ThreadLink",
    "oldest_first",
    "reply_recipients",
    "reply_subject",
    "thread_groups",
    "thread_headers",
]


class ThreadLink(NamedTuple):
    """The threading headers of one indexed message."""

    id: str
    message_id: str | None
    in_reply_to: str | None
    references: list[str]


def thread_groups(links: Iterable[ThreadLink]) -> dict[str, str]:
    """Message id → thread key, for every message given."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    ids: list[str] = []
    for link in links:
        node = f"id:{link.id}"
        ids.append(link.id)
        find(node)
        linked = [*link.references]
        if link.in_reply_to:
            linked.append(link.in_reply_to)
        if link.message_id:
            linked.append(link.message_id)
        for m in linked:
            union(node, f"mid:{m}")
    return {i: find(f"id:{i}") for i in ids}


def oldest_first(records: Iterable[MailRecord]) -> list[MailRecord]:
    return sorted(records, key=lambda r: (r.date, r.id))


def thread_headers(parent: MailRecord) -> tuple[str | None, tuple[str, ...]]:
    """RFC 5322 §3.6.4: In-Reply-To is the parent's Message-ID; References is the parent's
    References (or its In-Reply-To) followed by the parent's Message-ID."""
    stub = Parsed(
        protocol=False,
        type=None,
        valid=False,
        oops=None,
        message_id=parent.message_id,
        in_reply_to=parent.in_reply_to,
        references=parent.references,
    )
    return reply_headers(stub)


def reply_subject(subject: str) -> str:
    """`Re:` added once."""
    return subject if re.match(r"(?i)re\s*:", subject) else f"Re: {subject}"


def reply_recipients(parent: MailRecord, me: str, *, reply_all: bool) -> tuple[str, list[str]]:
    """(to, cc) for a reply from `me`: Reply-To or From; reply-all adds To and Cc minus ourselves."""
    to = parent.reply_to or parent.from_addr
    if parent.folder == "sent" and parent.to_addrs:
        to = parent.to_addrs[0]  # replying to our own sent mail continues with its recipient
    to = single_address("to", to).lower()
    cc: list[str] = []
    if reply_all:
        for a in (*parent.to_addrs, *parent.cc_addrs):
            a = a.lower()
            if a not in (me, to) and a not in cc:
                cc.append(a)
    return to, cc
