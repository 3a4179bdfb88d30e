"""The conformance corpus through the engine: whatever arrives, `handle` returns an
Outcome (never raises), answers protocol mistakes with the parser's code exactly once,
never answers an OOPS or non-protocol mail, and every reply it writes composes."""

from __future__ import annotations

import json
from pathlib import Path

from tests._engines import worker

from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Oops
from envelopay.protocol.parse import parse
from envelopay.testing import mock_rail as k

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"


async def test_every_corpus_vector_is_handled_as_a_value(tmp_path: Path) -> None:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    vectors = manifest["vectors"]
    assert len(vectors) > 300
    store = SqliteStore(tmp_path / "ledger.db")
    rail = k.DictRail()
    # One peer sends the whole corpus: RFC 3834's answer limits would hold its answers.
    engine = worker(store, rail, "c", answer_limits=None)
    answered = silent = 0
    for vec in vectors:
        raw = (CORPUS / vec["file"]).read_bytes()
        expect = vec["expect"]
        outcome = await engine.handle(raw)
        again = await engine.handle(raw)
        assert again.repeat == "message_id" or outcome.status in ("ignored", "busy", "deferred"), vec["file"]
        assert again.outbox == outcome.outbox, vec["file"]
        for mid in outcome.outbox:
            row = store.outbox_get(mid)
            assert row is not None, vec["file"]
            assert compose(row.outbound).startswith(b"From: "), vec["file"]
        if vec.get("options"):
            continue  # parsed here with default options; only the no-crash rules apply
        if parse(raw).from_addr is None:
            # No single sender to answer (e.g. two From addresses): nobody gets a reply;
            # protocol mail of that kind is quarantined with its reason.
            assert outcome.status in ("ignored", "quarantined") and outcome.outbox == (), vec["file"]
            silent += 1
        elif not expect["protocol"]:
            assert (outcome.status, outcome.outbox) == ("ignored", ()), vec["file"]
            silent += 1
        elif expect["type"] == "oops" or (expect["oops"] is None and not expect["valid"]):
            assert outcome.outbox == () or not isinstance(
                store.outbox_get(outcome.outbox[0]).outbound.message,
                Oops,  # type: ignore[union-attr]
            ), vec["file"]
            silent += 1
        elif not expect["valid"]:
            assert (outcome.status, outcome.oops) == ("refused", OopsCode(expect["oops"])), vec["file"]
            assert len(outcome.outbox) == 1, vec["file"]
            answered += 1
    assert answered > 50 and silent > 20
    store.close()
