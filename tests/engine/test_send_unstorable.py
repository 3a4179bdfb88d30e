"""Issue 29, item 12, at the engine: a message we compose that no mail or ledger row can
hold (a lone surrogate or NUL in a field, a task too deep to serialize) is refused by
`Engine.send` before its first write, on both stores. Before, the flow and its outbox
row were committed and the drainer failed at compose ("UnicodeEncodeError ... surrogates
not allowed"), leaving a flow in `ordered` and a failed row behind."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from tests._engines import worker

from envelopay.errors import UsageError
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Order, Which
from envelopay.testing import mock_rail as k

PEER = "buyer@garden.test"


def _deep(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("name", "message"), [
    ("surrogate in the task", Order(id="ord_s", task={"name": "digest", "text": "x\ud800"})),
    ("NUL in the note", Which(id="wch_n", note="a\x00b")),
    ("a task too deep to serialize", Order(id="ord_d", task={"x": _deep(2_000)})),
])
async def test_a_message_no_mail_can_hold_is_refused_before_any_write(store: Store, name: str,
                                                                     message: Any) -> None:
    engine = worker(store, k.DictRail())
    with pytest.raises(UsageError, match="nothing was written"):
        await engine.send(message, PEER)
    assert store.list_flows(k.WORKER) == []
    assert store.outbox_pending(datetime(2100, 1, 1, tzinfo=UTC)) == []
    # The same engine still sends what can be sent.
    sent = await engine.send(Which(id="wch_ok"), PEER)
    assert [r.flow_id for r in store.list_flows(k.WORKER)] == [sent.flow_id]
