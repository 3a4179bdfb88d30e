"""The outbox claim part of the Store contract, run by `check_store`: `outbox_claim_one`,
the claim a send takes to deliver its own row beside a drain (engine/outbox.py send_now),
and `outbox_claimable`, the read a drain makes before it claims.

The checks claim rows by Message-ID only, and use addresses and flow ids of their own,
so stores over one shared database do not touch each other's rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from envelopay.ledger.store import Commit, Store
from envelopay.protocol.messages import Invoice
from envelopay.protocol.outbound import Outbound

__all__ = ["OUTBOX_CHECKS"]

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
LEASE = timedelta(seconds=60)
_seq = itertools.count(1)


def _out(local: str, name: str) -> Outbound:
    return Outbound(
        local,
        "peer@store.test",
        Invoice(id=f"inv_{name}", amount=10**30, token="USDC", chain="solana", wallet="W"),
        f"<{name}.{local}>",
        T0,
    )


def _written(s: Store, local: str, rows: tuple[tuple[Outbound, str | None], ...]) -> Outbound:
    """`rows` committed pending in one step, and a held row beside them (never drained):
    the held row."""
    assert s.commit_step(Commit(local, T0, {"status": "sent"}, outbox=rows)) == "ok"
    held = _out(local, "held")
    held_commit = Commit(local, T0, {"status": "sent"}, outbox=((held, None),), hold="list_mail")
    assert s.commit_step(held_commit) == "ok"
    return held


def check_outbox_claim_one(factory: Callable[[], Store]) -> None:
    """One row by Message-ID: only pending, due, under no live claim (its own owner's
    either) and first of its flow's pending rows; None otherwise; once per live claim."""
    s, n = factory(), next(_seq)
    local, f, g = f"claim-one-{n}@store.test", f"flow-claim-one-{n}-f", f"flow-claim-one-{n}-g"
    f1, f2, solo, g1, g2, gone = (_out(local, k) for k in ("f1", "f2", "solo", "g1", "g2", "gone"))
    held = _written(s, local, ((f1, f), (f2, f), (solo, None), (g1, g), (g2, g), (gone, None)))
    assert s.mark_failed(g1.message_id, T0, "451 later", retry_at=T0 + timedelta(minutes=10))
    assert s.mark_failed(gone.message_id, T0, "550 no such user")

    def one(ob: Outbound, owner: str, at: datetime = T0) -> Outbound | None:
        row = s.outbox_claim_one(ob.message_id, owner, at, at + LEASE)
        assert row is None or row.status == "pending", row
        return None if row is None else row.outbound

    for ob in (f2, g2, g1, held, gone):  # behind f1; behind g1; not due; held; failed
        assert one(ob, "a") is None, ob.message_id
    assert s.outbox_claim_one("<no-such-row@store.test>", "a", T0, T0 + LEASE) is None
    assert one(f1, "a") == f1
    assert one(f1, "b") is None  # another owner's live claim
    assert one(f1, "a") is None  # its own owner's too: a drain of that process may hold it
    assert one(f2, "b") is None  # f1 still pending
    late = T0 + LEASE + timedelta(seconds=1)
    assert one(f1, "b", late) == f1  # a's lease ran out: taken over
    assert one(f1, "a", late) is None
    assert s.mark_sent(f1.message_id, late)
    assert one(f1, "a", late + LEASE * 2) is None  # sent: gone
    assert one(f2, "a") == f2  # now first of its flow
    # Marking a row failed with a retry ends its claim: another owner may take it.
    assert one(solo, "a") == solo
    assert s.mark_failed(solo.message_id, T0, "451 busy", retry_at=T0)
    assert one(solo, "b") == solo
    due = T0 + timedelta(minutes=11)
    assert one(g1, "a", due) == g1  # due now
    assert one(g2, "b", due) is None  # g1 pending, under a's claim
    row = s.outbox_get(g1.message_id)
    assert row is not None and row.attempts == 1 and row.status == "pending"


def check_outbox_claimable(factory: Callable[[], Store]) -> None:
    """The rows a claim may hand out, read without claiming: pending, due, under no live
    claim but the asker's, in outbox order; each row `outbox_claim` then hands out is
    listed, and listing claims nothing."""
    s, n = factory(), next(_seq)
    local, f = f"claimable-{n}@store.test", f"flow-claimable-{n}"
    first, second, later, mine, theirs, done = (
        _out(local, k) for k in ("first", "second", "later", "mine", "theirs", "done"))
    rows = ((first, f), (second, f), (later, None), (mine, None), (theirs, None), (done, None))
    held = _written(s, local, rows)
    assert s.mark_failed(later.message_id, T0, "451 later", retry_at=T0 + timedelta(minutes=10))
    assert s.mark_sent(done.message_id, T0)
    assert s.outbox_claim_one(mine.message_id, "a", T0, T0 + LEASE) is not None
    assert s.outbox_claim_one(theirs.message_id, "b", T0, T0 + LEASE) is not None

    def listed(owner: str, at: datetime = T0) -> list[str]:
        ours = {ob.message_id for ob, _ in (*rows, (held, None))}
        return [mid for mid in s.outbox_claimable(owner, at, 100_000) if mid in ours]

    assert listed("a") == [first.message_id, second.message_id, mine.message_id]
    assert listed("b") == [first.message_id, second.message_id, theirs.message_id]
    assert listed("a") == listed("a")  # a read: nothing was claimed
    late = T0 + timedelta(minutes=11)  # both leases ran out, `later` is due
    assert listed("c", late) == [first.message_id, second.message_id, later.message_id,
                                 mine.message_id, theirs.message_id]
    claimed = {r.outbound.message_id for r in s.outbox_claim("a", T0, T0 + LEASE, 100_000)}
    assert claimed & {ob.message_id for ob, _ in rows} <= set(listed("a"))
    assert first.message_id in claimed
    assert listed("b") == [theirs.message_id]  # the rest is under a's live claim now


OUTBOX_CHECKS: tuple[Callable[[Callable[[], Store]], None], ...] = (
    check_outbox_claim_one, check_outbox_claimable,
)
