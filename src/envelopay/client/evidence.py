"""`envelopay evidence FLOW --out DIR`: one folder that proves what happened in a flow, from
either side's ledger (the buyer's or the worker's), checked offline by the other side's
`envelopay evidence verify DIR` (client/evidence_check.py).

The folder holds the flow's mails exactly as received and sent, the DKIM key records as
they were seen (ledger/evidence.py keeps both as they happen: node/evidence_tap.py), each
PAY's proof with its on-chain verification — the payee's verdict as its ledger recorded
it, or, on the payer's side, a verification made now through the rail — each refund an
OOPS carries with its verification made now (payer the worker, payee the buyer), the FULFILL's
result hash, and the manifest (client/evidence_manifest.py) with every file's SHA-256.

The worker's job record (its ledger's word: states and when, attempts, refund, earlier
rounds) has one place per folder: inside result.json beside the FULFILL's hash when there
is a FULFILL, else job.json — so a job that failed and was refunded, or waits held, still
shows in the folder that it ran and how its money went back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from envelopay.client.buyer import ClientApp
from envelopay.client.evidence_manifest import FORMAT, JOB, MANIFEST, SEAL, canonical_json, sha256_hex
from envelopay.config import WorkerConfig
from envelopay.errors import TransportError, UsageError
from envelopay.flows.core import payee_wallet
from envelopay.ledger.evidence import EvidenceLog, KeptMail, SeenKey
from envelopay.ledger.store import FlowRecord, LogEntry, Store
from envelopay.node.agent_node import build_node
from envelopay.protocol.headers import HeaderBlock, read_headers
from envelopay.rails.interface import Expectation, Rail

__all__ = ["EvidenceWritten", "evidence_for", "read_folder", "write_evidence"]

_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass
class EvidenceWritten:
    out: Path
    flow_id: str
    files: int
    mails: int
    proofs: int
    result: bool
    missing: list[str] = field(default_factory=list)
    job: bool = False  # job.json written: a job without a FULFILL


@dataclass
class _Folder:
    files: dict[str, bytes] = field(default_factory=dict)
    mails: list[dict[str, Any]] = field(default_factory=list)
    proofs: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    key_files: dict[tuple[str, str], str] = field(default_factory=dict)

    def add_json(self, path: str, doc: Mapping[str, Any]) -> str:
        self.files[path] = json.dumps(doc, indent=2, sort_keys=True).encode("utf-8") + b"\n"
        return path


def _signature_names(raw: bytes) -> list[str]:
    """selector._domainkey.domain of each DKIM-Signature (the names a verifier looks up)."""
    block = read_headers(raw)
    if not isinstance(block, HeaderBlock):
        return []
    names = []
    for sig in block.get_all("dkim-signature"):
        tags = {k.strip(): v.strip() for k, _, v in (t.partition("=") for t in sig.value.split(";"))}
        if tags.get("d") and tags.get("s"):
            names.append(f"{tags['s']}._domainkey.{tags['d']}".lower())
    return names


def _key_for(seen: Sequence[SeenKey], at: datetime) -> SeenKey | None:
    """The record seen last at or before `at` (a mail kept before its key: the first one)."""
    before = [k for k in seen if k.first_seen <= at]
    return before[-1] if before else (seen[0] if seen else None)


def _keys(folder: _Folder, log: EvidenceLog, mail: KeptMail) -> list[str]:
    paths = []
    for name in _signature_names(mail.raw):
        key = _key_for(log.keys([name]), mail.at)
        if key is None:
            folder.missing.append(f"the key at {name} (for {mail.message_id}) was never seen")
            continue
        ident = (key.name, key.record)
        if ident not in folder.key_files:
            path = f"keys/{len(folder.key_files) + 1:02d}.json"
            folder.key_files[ident] = folder.add_json(path, {
                "name": key.name, "record": key.record, "source": key.source,
                "first_seen": key.first_seen.isoformat()})
        paths.append(folder.key_files[ident])
    return paths


def _add_mails(folder: _Folder, log: EvidenceLog, rec: FlowRecord, entries: Sequence[LogEntry]) -> None:
    wanted = [e for e in entries if e.message_id]
    kept = {(m.message_id, m.direction): m for m in log.mails(rec.local, [str(e.message_id) for e in wanted])}
    done: set[str] = set()
    for e in wanted:
        mid = str(e.message_id)
        if mid in done:
            continue
        done.add(mid)
        mail = kept.get((mid, e.direction))
        if mail is None:
            folder.missing.append(f"{e.type.upper()} {mid} ({e.direction}): its bytes were not kept")
            continue
        path = f"mails/{len(folder.mails) + 1:02d}-{e.type}-{e.direction}.eml"
        folder.files[path] = mail.raw
        folder.mails.append({"file": path, "message_id": mid, "direction": e.direction, "type": e.type,
                             "at": mail.at.isoformat(), "keys": _keys(folder, log, mail)})


def _payee(entries: Sequence[LogEntry], pay: Mapping[str, Any], data: Mapping[str, Any]) -> str | None:
    ref = pay.get("invoice_ref")
    for e in entries:
        if e.type == "invoice" and e.body is not None and ref and e.body.get("id") == ref:
            wallet = e.body.get("wallet")
            return str(wallet) if wallet else None
    return payee_wallet("pay", data)


async def _verdict_now(
    rails: Mapping[str, Rail], pay: Mapping[str, Any], payee: str | None
) -> dict[str, Any]:
    """The payer's side has no verdict in its ledger: ask the rail now."""
    rail = rails.get(str(pay.get("chain")))
    if rail is None or payee is None:
        return {"status": "unverified", "detail": "no rail for the chain, or no payee known"}
    expectation = Expectation(chain=str(pay["chain"]), token=str(pay["token"]), amount=int(pay["amount"]),
                              recipient=payee)
    return (await rail.verify(dict(pay["proof"]), expectation)).to_json()


async def _add_proofs(folder: _Folder, rec: FlowRecord, entries: Sequence[LogEntry],
                      rails: Mapping[str, Rail], now: datetime) -> None:
    for e in entries:
        if e.type != "pay" or e.body is None or not isinstance(e.body.get("proof"), dict):
            continue
        pay, payee = e.body, _payee(entries, e.body, rec.data)
        recorded = e.verdict is not None
        verdict = dict(e.verdict) if e.verdict is not None else await _verdict_now(rails, pay, payee)
        if verdict.get("status") != "ok":
            folder.missing.append(f"PAY {pay.get('id')}: verification {verdict.get('status')} "
                                  f"({verdict.get('reason') or verdict.get('detail')})")
            continue
        proof = pay["proof"]
        name = f"proofs/{len(folder.proofs) + 1:02d}-{_SAFE.sub('_', str(pay.get('id')))}.json"
        path = folder.add_json(name, {
            "message_id": e.message_id, "pay": pay.get("id"), "chain": pay.get("chain"),
            "token": pay.get("token"), "amount": str(pay.get("amount")),
            "tx": verdict.get("proof_key") or proof.get("tx") or proof.get("signature"),
            "payer": verdict.get("payer"), "payee": payee, "observed_amount": verdict.get("observed_amount"),
            "tx_time": verdict.get("tx_time"), "slot": verdict.get("slot"), "block": verdict.get("block"),
            "status": verdict.get("status"),
            "verified_by": rec.local, "verified_at": e.at.isoformat() if recorded else now.isoformat(),
            "how": "the payee's verdict, recorded when the PAY was verified" if recorded
            else "verified on the chain when this folder was written",
        })
        folder.proofs.append(path)


async def _add_refunds(folder: _Folder, rec: FlowRecord, entries: Sequence[LogEntry],
                       rails: Mapping[str, Rail], now: datetime) -> None:
    """Each refund an OOPS carries (SPEC.md "Refunds"), verified on its chain now: the
    transfer of its amount to its wallet (the buyer's), and who paid it (the worker)."""
    for e in entries:
        error = (e.body or {}).get("error") if e.type == "oops" else None
        back = error.get("refund") if isinstance(error, dict) else None
        if not isinstance(back, dict) or not isinstance(back.get("proof"), dict):
            continue
        verdict = await _verdict_now(rails, back, str(back.get("wallet") or "") or None)
        if verdict.get("status") != "ok":
            folder.missing.append(f"the refund in OOPS {e.message_id}: verification {verdict.get('status')} "
                                  f"({verdict.get('reason') or verdict.get('detail')})")
            continue
        proof = back["proof"]
        name = f"proofs/{len(folder.proofs) + len(folder.refunds) + 1:02d}-refund.json"
        folder.refunds.append(folder.add_json(name, {
            "message_id": e.message_id, "chain": back.get("chain"), "token": back.get("token"),
            "amount": str(back.get("amount")),
            "tx": verdict.get("proof_key") or proof.get("tx") or proof.get("signature"),
            "payer": verdict.get("payer"), "payee": back.get("wallet"),
            "observed_amount": verdict.get("observed_amount"), "tx_time": verdict.get("tx_time"),
            "slot": verdict.get("slot"), "block": verdict.get("block"), "status": verdict.get("status"),
            "verified_by": rec.local, "verified_at": now.isoformat(),
            "how": "verified on the chain when this folder was written",
        }))


def _add_result(folder: _Folder, entries: Sequence[LogEntry], job: Mapping[str, Any] | None) -> str | None:
    ful = next((e for e in reversed(entries) if e.type == "fulfill" and e.body is not None), None)
    if ful is None or ful.body is None:
        return None
    result = ful.body.get("result")
    return folder.add_json("result.json", {
        "fulfill": ful.message_id, "order_ref": ful.body.get("order_ref"),
        "sha256": sha256_hex(canonical_json(result)), "hashed_as": "JSON, keys sorted, no spaces, UTF-8",
        "job": dict(job) if job is not None else None,
    })


def _add_job(folder: _Folder, result: str | None, job: Mapping[str, Any] | None) -> str | None:
    """job.json: the job's record when no FULFILL carries it in result.json."""
    if result is not None or job is None:
        return None
    return folder.add_json(JOB, {
        "job": dict(job),
        "how": "the worker's job record as its ledger held it when this folder was written"})


def _job(store: Store, flow_id: str) -> dict[str, Any] | None:
    """The worker's job for the flow (its result hash, its states and when), if it has one.
    `at` is this round's; `rounds` the earlier ones `jobs retry` ended (oldest first), so a
    job that was held and retried shows when it first ran and how that round ended."""
    job = store.job_for_flow(flow_id)
    if job is None:
        return None
    return {"job_id": job.job_id, "task": job.task, "state": job.state, "attempts": job.attempts,
            "result_hash": job.result_hash, "refund": dict(job.refund) if job.refund is not None else None,
            "error": job.error,
            "at": _times(job.times()), "rounds": [r.doc() for r in job.rounds]}


def _times(at: Mapping[str, datetime]) -> dict[str, str]:
    return {state: when.isoformat() for state, when in sorted(at.items())}


def _write(out: Path, folder: _Folder, manifest: Mapping[str, Any]) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out: {out} exists and is not an empty folder")
    for sub in ("mails", "keys", "proofs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    for path, data in folder.files.items():
        (out / path).write_bytes(data)
    body = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8") + b"\n"
    (out / MANIFEST).write_bytes(body)
    (out / SEAL).write_bytes(sha256_hex(body).encode("ascii") + b"\n")


async def write_evidence(
    store: Store, log: EvidenceLog, flow_id: str, out: Path, *, now: datetime,
    rails: Mapping[str, Rail] | None = None, job: Mapping[str, Any] | None = None,
) -> EvidenceWritten:
    """Write FLOW's evidence folder to `out` (absent or empty); an unknown flow → UsageError."""
    rec = store.get_flow(flow_id)
    if rec is None:
        raise UsageError(f"FLOW: no flow {flow_id!r} in this ledger")
    entries = store.flow_log(flow_id)
    folder = _Folder()
    _add_mails(folder, log, rec, entries)
    await _add_proofs(folder, rec, entries, rails or {}, now)
    await _add_refunds(folder, rec, entries, rails or {}, now)
    record = job if job is not None else _job(store, flow_id)
    result = _add_result(folder, entries, record)
    job_file = _add_job(folder, result, record)
    manifest = {
        "format": FORMAT,
        "produced": {"by": rec.local, "side": rec.side, "at": now.isoformat()},
        "flow": {"id": rec.flow_id, "kind": rec.kind, "side": rec.side, "state": rec.state,
                 "local": rec.local, "peer": rec.peer, "created_at": rec.created_at.isoformat(),
                 "updated_at": rec.updated_at.isoformat()},
        "files": {p: sha256_hex(d) for p, d in sorted(folder.files.items())},
        "mails": folder.mails, "proofs": folder.proofs, "result": result, "missing": folder.missing,
        "refunds": folder.refunds,
    }
    if job_file is not None:  # absent otherwise: a folder with a FULFILL reads as before
        manifest["job"] = job_file
    _write(out, folder, manifest)
    return EvidenceWritten(out, flow_id, len(folder.files) + 2, len(folder.mails), len(folder.proofs),
                           result is not None, folder.missing, job_file is not None)


async def evidence_for(cfg: WorkerConfig, flow_id: str, out: Path, *, now: datetime) -> EvidenceWritten:
    """`envelopay evidence FLOW`: the folder from the ledger the config names; a payer's
    proofs verified through the config's rails."""
    # The node for its ledger, evidence tables and rails; it sends nothing.
    node = build_node(cfg, app=ClientApp({}), transport=_Nowhere())
    try:
        if node.evidence is None:
            raise UsageError("FLOW: this agent's store keeps no raw mail (not a SQLite or PostgreSQL ledger)")
        return await write_evidence(node.store, node.evidence, flow_id, out, now=now, rails=node.rails)
    finally:
        await node.close()
        node.store.close()


class _Nowhere:
    """The transport of a node that only reads: writing evidence never sends mail."""

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        raise TransportError("writing evidence sends no mail")

    async def close(self) -> None:
        return None


def read_folder(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` by its path inside it ('/'-separated). A symbolic link is
    never followed: it reads as empty, so it matches no hash."""
    files: dict[str, bytes] = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if path.is_symlink():
            files[rel] = b""
        elif path.is_file():
            files[rel] = path.read_bytes()
    return files
