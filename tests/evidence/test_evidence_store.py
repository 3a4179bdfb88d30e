"""What the evidence folder is made of, kept as it happens (ledger/evidence.py and the
node's taps, node/evidence_tap.py), on SQLite and PostgreSQL: the first bytes kept under a
Message-ID stay, byte for byte; each key record is kept once with when it was first seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from envelopay.engine import Outcome
from envelopay.engine.outbox import DirectHook
from envelopay.ledger._sql import SqlStore
from envelopay.ledger.evidence import EvidenceLog, evidence_log
from envelopay.ledger.retention import compact_ledger
from envelopay.ledger.store import Claim, Commit, FlowRecord, FlowWrite, LogEntry, Store
from envelopay.node.evidence_tap import keep_received, keeping_keys, keeping_sent
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
RAW = (b"From: a@x.test\r\nTo: b@y.test\r\nMessage-ID: <m1@x.test>\r\nSubject: PAY\r\n\r\n"
       b"\x00\xff\xfe body\r\n")


def _log(store: Store) -> EvidenceLog:
    log = evidence_log(store)
    assert log is not None
    return log


def test_mails_are_kept_byte_for_byte_and_the_first_stays(store: Store) -> None:
    log = _log(store)
    log.keep_mail("b@y.test", "<m1@x.test>", "in", RAW, T0)
    log.keep_mail("b@y.test", "<m1@x.test>", "in", RAW + b"changed", T0 + timedelta(seconds=5))
    log.keep_mail("a@x.test", "<m1@x.test>", "out", RAW, T0)
    [kept] = log.mails("b@y.test", ["<m1@x.test>", "<absent@x.test>"])
    assert (kept.raw, kept.direction, kept.at) == (RAW, "in", T0)
    assert [m.direction for m in log.mails("a@x.test", ["<m1@x.test>"])] == ["out"]
    assert log.mails("b@y.test", []) == []


def test_each_key_record_is_kept_once_with_when_it_was_first_seen(store: Store) -> None:
    log = _log(store)
    log.keep_key("Sel._domainkey.X.test.", "v=DKIM1; p=AAA", "dns", T0)
    log.keep_key("sel._domainkey.x.test", "v=DKIM1; p=AAA", "dns", T0 + timedelta(hours=1))
    _log(store).keep_key("sel._domainkey.x.test", "v=DKIM1; p=AAA", "dns", T0 + timedelta(hours=2))
    log.keep_key("sel._domainkey.x.test", "v=DKIM1; p=BBB", "dns", T0 + timedelta(days=1))
    keys = log.keys(["SEL._domainkey.x.test"])
    assert [(k.name, k.record, k.first_seen) for k in keys] == [
        ("sel._domainkey.x.test", "v=DKIM1; p=AAA", T0),
        ("sel._domainkey.x.test", "v=DKIM1; p=BBB", T0 + timedelta(days=1)),
    ]
    with store.write() as x:  # type: ignore[attr-defined]
        rows = x.all("SELECT version FROM ep_versions WHERE component = 'evidence'")
    assert [int(r["version"]) for r in rows] == [1]  # a second EvidenceLog applied nothing again


class _Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        self.sent.append(raw)

    async def close(self) -> None:
        self.sent.append(b"closed")


async def test_the_taps_keep_what_was_sent_received_and_looked_up(store: Store) -> None:
    log = _log(store)
    sink = _Sink()
    signer = lambda raw: b"Signed: yes\r\n" + raw  # noqa: E731
    hook = DirectHook(sink, signer=signer, kept=keeping_sent(log, clock=lambda: T0))
    out = Outbound("a@x.test", "b@y.test", Which(id="w1"), "<m1@x.test>", T0)
    assert (await hook(out, RAW)).status == "sent"
    assert sink.sent == [b"Signed: yes\r\n" + RAW]
    # The bytes as the transport took them, signature included, under the row's Message-ID.
    assert [m.raw for m in log.mails("a@x.test", ["<m1@x.test>"])] == [b"Signed: yes\r\n" + RAW]

    async def dns(name: str) -> str | None:
        return "v=DKIM1; p=CCC" if name.startswith("s1.") else None

    lookup = keeping_keys(dns, log, clock=lambda: T0)
    assert await lookup("s1._domainkey.x.test") == "v=DKIM1; p=CCC"
    assert await lookup("s2._domainkey.x.test") is None
    seen = log.keys(["s1._domainkey.x.test", "s2._domainkey.x.test"])
    assert [k.record for k in seen] == ["v=DKIM1; p=CCC"]

    other = RAW.replace(b"<m1@", b"<m2@")
    keep_received(log, "b@y.test", other, Outcome("busy", message_id="<m2@x.test>", flow_id="f1"), T0)
    keep_received(log, "b@y.test", other, Outcome("ignored", message_id="<m2@x.test>"), T0)
    assert log.mails("b@y.test", ["<m2@x.test>"]) == []  # not handled yet / in no flow
    keep_received(log, "b@y.test", other, Outcome("processed", message_id="<m2@x.test>", flow_id="f1"), T0)
    assert [m.raw for m in log.mails("b@y.test", ["<m2@x.test>"])] == [other]


def _flow(store: Store, n: int, at: datetime) -> tuple[str, str]:
    """A flow `f-n` whose log holds an ORDER in and a FULFILL out; (in, out) Message-IDs."""
    mid_in, mid_out = f"<in{n}@y.test>", f"<out{n}@x.test>"
    claim = Claim("b@y.test", mid_in, "h", "w1", at, at + timedelta(minutes=5), sender="a@x.test",
                  protocol_id=f"ord-{n}")
    assert store.begin_step(claim).status == "new"
    flow = FlowRecord(f"f-{n}", "b@y.test", "a@x.test", "order", "payee", "fulfilled", 0, {}, at, at)
    log = (LogEntry(f"f-{n}", at, "in", "order", mid_in, f"ord-{n}", "a@x.test", "b@y.test", {}),
           LogEntry(f"f-{n}", at, "out", "fulfill", mid_out, f"ful-{n}", "b@y.test", "a@x.test", {}))
    commit = Commit("b@y.test", at, {"status": "processed", "flow_id": f"f-{n}"}, message_id=mid_in,
                    worker="w1", flow=FlowWrite(flow), log=log, message_ids=((mid_in, f"f-{n}"),),
                    sender="a@x.test", protocol_id=f"ord-{n}", replay_fate="done")
    assert store.commit_step(commit) == "ok"
    return mid_in, mid_out


def test_retention_takes_the_kept_bytes_with_the_flow_log(store: Store) -> None:
    log = _log(store)
    old, new = _flow(store, 1, T0), _flow(store, 2, T0 + timedelta(days=60))
    for n, (mid_in, mid_out) in enumerate((old, new)):
        log.keep_mail("b@y.test", mid_in, "in", RAW, T0)
        log.keep_mail("b@y.test", mid_out, "out", RAW + bytes([n]), T0)
    assert isinstance(store, SqlStore)
    report = compact_ledger(store, older_than=timedelta(days=30), now=T0 + timedelta(days=61))
    assert report.flows == 1 and report.removed["ep_raw_mail"] == 2
    assert log.mails("b@y.test", list(old)) == []
    # A flow still in its window keeps its own.
    assert [m.direction for m in log.mails("b@y.test", list(new))] == ["in", "out"]
