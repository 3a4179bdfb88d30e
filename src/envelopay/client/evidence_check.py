"""`envelopay evidence verify`: what an evidence folder proves, checked offline, pure over
the folder's bytes (`check_evidence(files)`; the CLI reads the folder).

In order, the first failure ends the check with its reason:
1. tampered   — the manifest against its seal; every file against its SHA-256; no file
                missing, none unlisted;
2. unreadable — the manifest's shape (evidence_manifest.read_manifest);
3. signature  — each mail's DKIM signature, verified by dkimpy against the key records the
                folder holds (a dnsfunc that answers from them), aligned with its From;
4. thread     — the mails are one flow between the flow's two parties: each mail after the
                first names an earlier one in In-Reply-To or References;
5. proof      — each proof's recorded verification agrees with the signed PAY (amount,
                token, chain, transaction, payer) and the signed INVOICE (payee); each
                refund's with the signed OOPS carrying it (amount, token, chain,
                transaction, wallet), paid back to the PAY's payer;
6. result     — the FULFILL's result hashes to the recorded SHA-256; the job's earlier
                rounds (`jobs retry`), when the folder has them, read as rounds
                (`unreadable` if not; a folder without them reads as before);
7. job        — the worker's job record (result.json's `job`, or job.json when the flow
                has a job but no FULFILL) reads as one (`unreadable` if not): read, not
                proven — the worker's word, sealed with the folder. A folder written
                before job.json existed has none, and reads as before.
What is proven is then said from the signed mails: who asked, who paid how much and
when, what was delivered down to the result's hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

from envelopay.client.evidence_manifest import (
    MANIFEST,
    SEAL,
    MailEntry,
    Manifest,
    ManifestError,
    canonical_json,
    read_manifest,
    sha256_hex,
)
from envelopay.dkim.canon import to_crlf
from envelopay.dkim.results import aligned
from envelopay.protocol.headers import HeaderBlock, read_headers
from envelopay.protocol.outside_json import OutsideJsonError, loads
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.protocol.parsed import Parsed
from envelopay.protocol.status import STATUS

__all__ = ["EvidenceReport", "Mail", "check_evidence", "dkim_passes"]

# A folder may hold the extensions' messages too (WAIT, WHATSUP: SPEC.md "Status while
# working"): read as a peer that speaks them all.
_READ = ParseOptions(extensions=frozenset({STATUS}))


@dataclass(frozen=True, slots=True)
class Mail:
    entry: MailEntry
    raw: bytes
    parsed: Parsed
    date: str | None


@dataclass
class EvidenceReport:
    ok: bool = False
    reason: str | None = None  # tampered | unreadable | signature | thread | proof | result
    detail: str = ""
    checked: list[str] = field(default_factory=list)
    proven: dict[str, Any] = field(default_factory=dict)
    missing: tuple[str, ...] = ()


class _Fail(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _integrity(files: Mapping[str, bytes]) -> Manifest:
    got = read_manifest(files.get(MANIFEST, b""), files.get(SEAL)) if MANIFEST in files else ManifestError(
        "unreadable", f"no {MANIFEST}")
    if isinstance(got, ManifestError):
        raise _Fail(got.code, got.detail)
    for path, digest in got.files.items():
        if path not in files:
            raise _Fail("tampered", f"{path} is listed but missing")
        if sha256_hex(files[path]) != digest:
            raise _Fail("tampered", f"{path} does not match its SHA-256 in the manifest")
    extra = sorted(set(files) - set(got.files) - {MANIFEST, SEAL})
    if extra:
        raise _Fail("tampered", f"{extra[0]} is not listed in the manifest")
    return got


def dkim_passes(raw: bytes, records: Mapping[str, str]) -> tuple[bool, str]:
    """(at least one signature verifies against `records` with d= aligned to the From, what
    was found); dkimpy asks the records, never DNS."""
    # lazy: keeps dkimpy off the import of the manifest reader's users
    import dkim as dkimpy

    table = {k.lower().rstrip("."): v for k, v in records.items()}

    def dnsfunc(name: bytes, timeout: int = 5) -> bytes:
        found = table.get(name.decode("ascii", "replace").lower().rstrip("."))
        return found.encode("ascii", "replace") if found is not None else b""

    block = read_headers(raw)
    if not isinstance(block, HeaderBlock):
        return False, "the header block is refused"
    sigs = block.get_all("dkim-signature")
    if not sigs:
        return False, "not signed"
    parsed = parse(raw, options=_READ)
    from_domain = (parsed.from_addr or "").rpartition("@")[2]
    for i, sig in enumerate(sigs):
        tags = dict(t.strip().partition("=")[::2] for t in sig.value.split(";") if "=" in t)
        domain = tags.get("d", "").strip().lower()
        try:
            ok = bool(dkimpy.DKIM(to_crlf(raw)).verify(idx=i, dnsfunc=dnsfunc))
        except Exception as exc:  # hostile bytes: dkimpy raises assorted errors, each a fail
            return False, f"{type(exc).__name__}: {exc}"
        if ok and aligned(domain, from_domain):
            return True, f"d={domain} s={tags.get('s', '').strip()}"
    return False, "no signature verifies against the recorded keys with the From's domain"


def _key_records(files: Mapping[str, bytes], paths: tuple[str, ...]) -> dict[str, str]:
    records: dict[str, str] = {}
    for path in paths:
        doc = _json_file(files, path)
        name, record = doc.get("name"), doc.get("record")
        if not isinstance(name, str) or not isinstance(record, str):
            raise _Fail("unreadable", f"{path}: wants a name and a record")
        records[name] = record
    return records


def _json_file(files: Mapping[str, bytes], path: str) -> dict[str, Any]:
    try:
        doc = loads(files[path])
    except OutsideJsonError as exc:
        raise _Fail("unreadable", f"{path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise _Fail("unreadable", f"{path}: wants an object")
    return doc


def _mails(files: Mapping[str, bytes], manifest: Manifest) -> list[Mail]:
    mails: list[Mail] = []
    for entry in manifest.mails:
        raw = files[entry.file]
        ok, found = dkim_passes(raw, _key_records(files, entry.keys))
        if not ok:
            raise _Fail("signature", f"{entry.file}: {found}")
        parsed = parse(raw, options=_READ)
        if parsed.message_id != entry.message_id or (parsed.type or "") != entry.type:
            raise _Fail("thread", f"{entry.file}: not the {entry.type} {entry.message_id} the manifest names")
        block = read_headers(raw)
        date = date_of(block.one("date")) if isinstance(block, HeaderBlock) else None
        mails.append(Mail(entry, raw, parsed, date))
    if not mails:
        raise _Fail("thread", "the folder holds no mail")
    return mails


def _thread(mails: list[Mail], manifest: Manifest) -> None:
    parties = {manifest.flow["local"].lower(), manifest.flow["peer"].lower()}
    seen: set[str] = set()
    for i, mail in enumerate(mails):
        sender = (mail.parsed.from_addr or "").lower()
        to = {a.lower() for a in mail.parsed.to_addrs}
        if sender not in parties or not (parties - {sender}) & to:
            raise _Fail("thread", f"{mail.entry.file}: not between {' and '.join(sorted(parties))}")
        mine = sender == manifest.produced_by.lower()
        if mine != (mail.entry.direction == "out"):
            raise _Fail("thread", f"{mail.entry.file}: its From disagrees with its direction")
        ids = {x for x in (mail.parsed.in_reply_to, *mail.parsed.references) if x}
        if i and not ids & seen:
            raise _Fail("thread", f"{mail.entry.file}: does not reply to an earlier mail of the folder")
        seen.add(mail.entry.message_id)


def _body(mail: Mail) -> dict[str, Any]:
    return dict(mail.parsed.body or {})


def _first(mails: list[Mail], kind: str, **match: str) -> Mail | None:
    for m in mails:
        body = _body(m)
        if m.entry.type == kind and all(body.get(k) == v for k, v in match.items()):
            return m
    return None


def _named(mails: list[Mail], kind: str, message_id: Any) -> Mail | None:
    return next((m for m in mails if m.entry.message_id == message_id and m.entry.type == kind), None)


def _same(recorded: Any, told: Any) -> bool:
    """One transaction or wallet, spelled alike (EVM hex in either case)."""
    if not isinstance(recorded, str) or not isinstance(told, str):
        return False
    return recorded.lower() == told.lower() if told.startswith("0x") else recorded == told


def _proof(files: Mapping[str, bytes], path: str, mails: list[Mail]) -> dict[str, Any]:
    rec = _json_file(files, path)
    pay = _named(mails, "pay", rec.get("message_id"))
    if pay is None:
        raise _Fail("proof", f"{path}: names no PAY of the folder")
    body = _body(pay)
    told = body.get("proof")
    proof: dict[str, Any] = told if isinstance(told, dict) else {}
    for key in ("amount", "token", "chain"):
        if str(rec.get(key)) != str(body.get(key)):
            raise _Fail("proof", f"{path}: {key} {rec.get(key)!r} is not the PAY's {body.get(key)!r}")
    if rec.get("status") != "ok":
        raise _Fail("proof", f"{path}: the verification was not ok ({rec.get('status')!r})")
    if not _same(rec.get("tx"), proof.get("tx", proof.get("signature"))):
        raise _Fail("proof", f"{path}: the transaction is not the one the PAY names")
    observed = str(rec.get("observed_amount", ""))
    if not observed.isdigit() or int(observed) < int(str(body.get("amount"))):
        raise _Fail("proof", f"{path}: observed {observed or 'nothing'}, the PAY says {body.get('amount')}")
    if isinstance(proof.get("payer"), str) and not _same(rec.get("payer"), proof["payer"]):
        raise _Fail("proof", f"{path}: payer {rec.get('payer')!r} is not the PAY's {proof['payer']!r}")
    invoice = _first(mails, "invoice", id=str(body.get("invoice_ref"))) if body.get("invoice_ref") else None
    if invoice is not None and not _same(rec.get("payee"), _body(invoice).get("wallet")):
        raise _Fail("proof", f"{path}: payee {rec.get('payee')!r} is not the INVOICE's wallet")
    return {
        "by": pay.parsed.from_addr, "pay": body.get("id"), "amount": str(body.get("amount")),
        "token": body.get("token"), "chain": body.get("chain"), "tx": rec.get("tx"),
        "payer": rec.get("payer"), "payee": rec.get("payee"), "tx_time": rec.get("tx_time"),
        "slot": rec.get("slot"), "block": rec.get("block"),
        "mail_date": pay.date, "verified_by": rec.get("verified_by"), "verified_at": rec.get("verified_at"),
        "payee_from_invoice": invoice is not None,
    }


def _refund(
    files: Mapping[str, bytes], path: str, mails: list[Mail], paid: list[dict[str, Any]]
) -> dict[str, Any]:
    """A refund's on-chain verification against the signed OOPS that carries it (its chain,
    token, amount, wallet and transaction) and, when the folder proves a payment on its
    chain, paid back to the wallet that paid (the buyer)."""
    rec = _json_file(files, path)
    oops = _named(mails, "oops", rec.get("message_id"))
    error = _body(oops).get("error") if oops is not None else None
    back = error.get("refund") if isinstance(error, dict) else None
    if oops is None or not isinstance(back, dict):
        raise _Fail("proof", f"{path}: names no OOPS of the folder that carries a refund")
    told: dict[str, Any] = back["proof"] if isinstance(back.get("proof"), dict) else {}
    for key in ("amount", "token", "chain"):
        if str(rec.get(key)) != str(back.get(key)):
            raise _Fail("proof", f"{path}: {key} {rec.get(key)!r} is not the OOPS refund's {back.get(key)!r}")
    if rec.get("status") != "ok":
        raise _Fail("proof", f"{path}: the verification was not ok ({rec.get('status')!r})")
    if not _same(rec.get("tx"), told.get("tx", told.get("signature"))):
        raise _Fail("proof", f"{path}: the transaction is not the one the OOPS names")
    observed = str(rec.get("observed_amount", ""))
    if not observed.isdigit() or int(observed) < int(str(back.get("amount"))):
        raise _Fail("proof", f"{path}: observed {observed or 'nothing'}, the OOPS says {back.get('amount')}")
    if not _same(rec.get("payee"), back.get("wallet")):
        raise _Fail("proof", f"{path}: payee {rec.get('payee')!r} is not the OOPS refund's wallet")
    # The money goes back to whoever paid it. Who pays it back is said, not required to be
    # the wallet paid: a worker may refund from its rail key while it is paid to another.
    for p in paid:
        if p["chain"] == back.get("chain") and not _same(rec.get("payee"), p["payer"]):
            raise _Fail("proof", f"{path}: not back to {p['payer']}, who paid")
    return {"by": oops.parsed.from_addr, "amount": str(back.get("amount")), "token": back.get("token"),
            "chain": back.get("chain"), "tx": rec.get("tx"), "payer": rec.get("payer"),
            "payee": rec.get("payee"), "slot": rec.get("slot"), "block": rec.get("block"),
            "tx_time": rec.get("tx_time"), "verified_by": rec.get("verified_by"),
            "verified_at": rec.get("verified_at")}


def _result(files: Mapping[str, bytes], path: str, mails: list[Mail]) -> dict[str, Any]:
    rec = _json_file(files, path)
    ful = _named(mails, "fulfill", rec.get("fulfill"))
    if ful is None:
        raise _Fail("result", f"{path}: names no FULFILL of the folder")
    body = _body(ful)
    digest = sha256_hex(canonical_json(body.get("result")))
    if rec.get("sha256") != digest:
        raise _Fail("result", f"{path}: the FULFILL's result hashes to {digest}, not {rec.get('sha256')}")
    job = rec.get("job")
    if isinstance(job, dict) and job.get("result_hash") not in (None, digest):
        raise _Fail("result", f"{path}: the job's result hash is not the FULFILL's")
    order = _first(mails, "order", id=str(body.get("order_ref")))
    said = {"by": ful.parsed.from_addr, "date": ful.date, "order_ref": body.get("order_ref"),
            "result_sha256": digest, "order_in_folder": order is not None}
    return said


def _job_record(files: Mapping[str, bytes], manifest: Manifest) -> tuple[str, Any] | None:
    """Where the folder keeps the job's record, and the record: one place (job.json, or
    result.json beside the FULFILL); None when the folder has no job (the buyer's side)."""
    if manifest.job is not None:
        doc = _json_file(files, manifest.job)
        if not isinstance(doc.get("job"), dict):
            raise _Fail("unreadable", f"{manifest.job}: wants the job's record under job")
        return manifest.job, doc["job"]
    if manifest.result is not None:
        job = _json_file(files, manifest.result).get("job")
        return (manifest.result, job) if job is not None else None
    return None


def _job(path: str, job: Any, mails: list[Mail]) -> dict[str, Any]:
    """The worker's job record as a claim: its id, task, state, attempts, times, error,
    refund and earlier rounds, read (its shape checked), not proven — the worker's ledger's
    word, sealed with the folder. Whether its refund's transaction is the one a signed OOPS
    of the folder carries is said (`refund_in_oops`), not required: a folder written while
    the refund was being paid has no OOPS yet."""
    where = f"{path}: job"
    if not isinstance(job, dict):
        raise _Fail("unreadable", f"{where}: wants an object")
    for key in ("job_id", "task", "state"):
        if not isinstance(job.get(key), str) or not job[key]:
            raise _Fail("unreadable", f"{where}.{key}: wants text")
    attempts, at = _attempts_at(where, job.get("attempts", 0), job.get("at", {}))
    refund = job.get("refund")
    if refund is not None and not isinstance(refund, dict):
        raise _Fail("unreadable", f"{where}.refund: wants an object")
    for key in ("error", "result_hash"):
        if job.get(key) is not None and not isinstance(job[key], str):
            raise _Fail("unreadable", f"{where}.{key}: wants text")
    said: dict[str, Any] = {
        "file": path, "job_id": job["job_id"], "task": job["task"], "state": job["state"],
        "attempts": attempts, "at": dict(at), "error": job.get("error"),
        "result_hash": job.get("result_hash"),
        "refund": dict(refund) if refund is not None else None,
        "rounds": _rounds(path, job["rounds"]) if "rounds" in job else [],
        "how": "the worker's job record, sealed with the folder: read, not proven",
    }
    told = refund.get("proof") if refund is not None else None
    tx = told.get("tx", told.get("signature")) if isinstance(told, dict) else None
    if tx is not None:
        carried = [(_oops(m).get("refund") or {}).get("proof") for m in mails if m.entry.type == "oops"]
        said["refund_in_oops"] = any(isinstance(c, dict) and _same(tx, c.get("tx", c.get("signature")))
                                     for c in carried)
    return said


def _job_line(job: Mapping[str, Any]) -> str:
    """The job.json record as a person reads it (result.json's says its rounds, as before)."""
    line = (f"the job's record ({job['file']}, the worker's word sealed with the folder, read, not proven): "
            f"{job['job_id']} (task {job['task']}) {job['state']} after {job['attempts']} attempt(s)"
            f", {len(job['rounds'])} earlier round(s)")
    when = job["at"].get(job["state"])
    if when:
        line += f", {job['state']} at {when}"
    if "refund_in_oops" in job:
        line += (", its refund the one a signed OOPS of the folder carries" if job["refund_in_oops"]
                 else ", its refund carried by no signed OOPS of the folder")
    return line


def _rounds(path: str, rounds: Any) -> list[dict[str, Any]]:
    """The job's earlier rounds (`jobs retry`), as the worker's ledger recorded them: read,
    not proven (the worker's word, sealed with the folder). A folder written before rounds
    were recorded has none, and reads as before."""
    if not isinstance(rounds, list):
        raise _Fail("unreadable", f"{path}: job.rounds wants a list")
    out = []
    for i, r in enumerate(rounds):
        where = f"{path}: job.rounds[{i}]"
        doc: dict[str, Any] = r if isinstance(r, dict) else {}
        attempts, at = _attempts_at(where, doc.get("attempts"), doc.get("at"))
        error = doc.get("error")
        if error is not None and not isinstance(error, str):
            raise _Fail("unreadable", f"{where}: error wants text")
        out.append({"attempts": attempts, "at": dict(at), "error": error})
    return out


def _attempts_at(where: str, attempts: Any, at: Any) -> tuple[int, dict[str, str]]:
    """A job record's (or round's) attempts, a count, and at, each state's ISO 8601 time."""
    if type(attempts) is not int or attempts < 0:
        raise _Fail("unreadable", f"{where}.attempts: wants a count")
    if not isinstance(at, dict) or not all(isinstance(s, str) and _is_time(t) for s, t in at.items()):
        raise _Fail("unreadable", f"{where}.at: wants each state's ISO 8601 time")
    return attempts, dict(at)


def _is_time(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        datetime.fromisoformat(text)
    except ValueError:
        return False
    return True


def _asked(mails: list[Mail]) -> dict[str, Any] | None:
    order = _first(mails, "order")
    if order is None:
        return None
    body = _body(order)
    task = body.get("task")
    name = task.get("name") if isinstance(task, dict) else None
    return {"by": order.parsed.from_addr, "date": order.date, "order": body.get("id"), "task": name,
            "task_sha256": sha256_hex(canonical_json(task))}


def check_evidence(files: Mapping[str, bytes]) -> EvidenceReport:
    """What the folder whose files are `files` (path relative to it → bytes) proves."""
    report = EvidenceReport()
    try:
        manifest = _integrity(files)
        report.missing = manifest.missing
        report.checked.append(f"{len(manifest.files) + 2} files match the manifest and its seal")
        mails = _mails(files, manifest)
        report.checked.append(f"{len(mails)} mails carry DKIM signatures verified against the recorded keys")
        _thread(mails, manifest)
        report.checked.append(f"the mails are one thread between {manifest.flow['local']} and "
                              f"{manifest.flow['peer']}")
        paid = [_proof(files, p, mails) for p in manifest.proofs]
        if paid:
            report.checked.append(f"{len(paid)} proof(s) agree with the signed PAY and INVOICE")
        refunded = [_refund(files, p, mails, paid) for p in manifest.refunds]
        if refunded:
            report.checked.append(f"{len(refunded)} refund(s) verified on chain agree with the signed OOPS")
        delivered = _result(files, manifest.result, mails) if manifest.result else None
        if delivered is not None:
            report.checked.append("the FULFILL's result matches its recorded hash")
        record = _job_record(files, manifest)
        job = _job(*record, mails) if record is not None else None
        if delivered is not None and record is not None and job is not None and "rounds" in record[1]:
            delivered["job_rounds"] = job["rounds"]  # the record is read once, by _job
            report.checked.append(f"the job's record reads, with {len(delivered['job_rounds'])} earlier "
                                  "round(s) of attempts")
        if job is not None and manifest.job is not None:
            report.checked.append(_job_line(job))
    except _Fail as fail:
        report.reason, report.detail = fail.reason, fail.detail
        return report
    oops = [_oops(m) for m in mails if m.entry.type == "oops"]
    report.proven = {"flow": dict(manifest.flow), "asked": _asked(mails), "paid": paid,
                     "delivered": delivered, "oops": oops, "refunded": refunded, "job": job}
    report.ok = True
    return report


def _oops(m: Mail) -> dict[str, Any]:
    """An OOPS as a claim: who refused what, and the refund it carries (issue 31 item 3:
    chain, token, amount, wallet, proof) — the sender's signed word, not checked on a chain."""
    error = _body(m).get("error")
    error = error if isinstance(error, dict) else {}
    refund = error.get("refund")
    return {"by": m.parsed.from_addr, "date": m.date, "code": error.get("code"),
            "refund": dict(refund) if isinstance(refund, dict) else None}


def date_of(text: str | None) -> str | None:
    """A mail's Date as ISO 8601 (the header as written when it does not read)."""
    if text is None:
        return None
    try:
        return parsedate_to_datetime(text).isoformat()
    except (TypeError, ValueError):
        return text
