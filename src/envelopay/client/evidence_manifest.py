"""The evidence folder's manifest: its shape, written by `envelopay evidence FLOW` and read
back — outside input — by `envelopay evidence verify`.

The folder (SPEC.md "Evidence"):

    manifest.json        this document
    manifest.sha256      the SHA-256 of manifest.json, hex, one line
    mails/NN-TYPE-DIR.eml  each mail of the flow, bytes exactly as received or sent
    keys/NN.json         each DKIM key record as seen (name, record, source, first_seen)
    proofs/NN.json       each proof with its on-chain verification (a refund's: `refunds`)
    result.json          the FULFILL's result hash (and the job's record, when there is one)
    job.json             the job's record when the flow has a job but no FULFILL (failed and
                         refunded, held, refunding): the worker's word, sealed like every file

Reading never raises: a manifest is a `Manifest` or a `ManifestError` (a code and what is
wrong), whatever the bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envelopay.protocol.outside_json import OutsideJsonError, loads

__all__ = [
    "FORMAT",
    "JOB",
    "MANIFEST",
    "SEAL",
    "MailEntry",
    "Manifest",
    "ManifestError",
    "canonical_json",
    "read_manifest",
    "sha256_hex",
]

FORMAT = "envelopay-evidence/1"
MANIFEST = "manifest.json"
SEAL = "manifest.sha256"
JOB = "job.json"
# A file name inside the folder: one of its three subfolders, result.json or job.json, no way out.
_PATH = re.compile(r"(?:(?:mails|keys|proofs)/[A-Za-z0-9][A-Za-z0-9._-]{0,120}|result\.json|job\.json)")
_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_FILES = 10_000


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    """The bytes a result is hashed as: sorted keys, no spaces, UTF-8 (not \\u escapes)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True, slots=True)
class ManifestError:
    code: str  # "unreadable" (not the manifest's shape) | "tampered" (the seal disagrees)
    detail: str


@dataclass(frozen=True, slots=True)
class MailEntry:
    file: str
    message_id: str
    direction: str  # "in" | "out", as the producer's ledger recorded it
    type: str
    at: str
    keys: tuple[str, ...]  # key files to verify this mail's signatures with


@dataclass(frozen=True, slots=True)
class Manifest:
    produced_by: str
    produced_at: str
    flow: Mapping[str, str]
    files: Mapping[str, str]  # path → sha256 hex
    mails: tuple[MailEntry, ...]
    proofs: tuple[str, ...]
    result: str | None
    missing: tuple[str, ...]
    refunds: tuple[str, ...] = ()  # the refunds' on-chain verifications, under proofs/ too
    job: str | None = None  # job.json; None in a folder with a FULFILL, or written before job.json


class _Bad(Exception):
    pass


def _str(obj: Mapping[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise _Bad(f"{where}.{key}: wants a non-empty string")
    return value


def _obj(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{where}: wants an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or len(value) > _MAX_FILES:
        raise _Bad(f"{where}: wants a list (at most {_MAX_FILES})")
    return value


def _path(value: Any, where: str, files: Mapping[str, str] | None = None) -> str:
    if not isinstance(value, str) or _PATH.fullmatch(value) is None or ".." in value:
        raise _Bad(f"{where}: {value!r} is not a file of the folder")
    if files is not None and value not in files:
        raise _Bad(f"{where}: {value} is not listed in files")
    return value


def _mail(value: Any, i: int, files: Mapping[str, str]) -> MailEntry:
    where = f"mails[{i}]"
    m = _obj(value, where)
    direction = _str(m, "direction", where)
    if direction not in ("in", "out"):
        raise _Bad(f"{where}.direction: wants 'in' or 'out'")
    keys = tuple(_path(k, f"{where}.keys", files) for k in _list(m.get("keys", []), f"{where}.keys"))
    return MailEntry(_path(m.get("file"), f"{where}.file", files), _str(m, "message_id", where),
                     direction, _str(m, "type", where), _str(m, "at", where), keys)


def _files(value: Any) -> dict[str, str]:
    files: dict[str, str] = {}
    for path, digest in _obj(value, "files").items():
        _path(path, "files")
        if not isinstance(digest, str) or _HEX.fullmatch(digest) is None:
            raise _Bad(f"files.{path}: wants a SHA-256 in lower-case hex")
        files[path] = digest
    if len(files) > _MAX_FILES:
        raise _Bad(f"files: more than {_MAX_FILES}")
    return files


def _manifest(doc: Any) -> Manifest:
    top = _obj(doc, "manifest")
    if top.get("format") != FORMAT:
        raise _Bad(f"format: wants {FORMAT!r}")
    produced = _obj(top.get("produced"), "produced")
    flow = _obj(top.get("flow"), "flow")
    flow_fields = {k: _str(flow, k, "flow") for k in ("id", "kind", "side", "state", "local", "peer")}
    files = _files(top.get("files"))
    mails = tuple(_mail(m, i, files) for i, m in enumerate(_list(top.get("mails"), "mails")))
    proofs = tuple(_path(p, "proofs", files) for p in _list(top.get("proofs", []), "proofs"))
    refunds = tuple(_path(p, "refunds", files) for p in _list(top.get("refunds", []), "refunds"))
    result, job = top.get("result"), top.get("job")
    if result is not None and job is not None:  # the job's record has one place: result.json when there
        raise _Bad("job: a folder with a result keeps the job's record in it")
    missing = _list(top.get("missing", []), "missing")
    if not all(isinstance(x, str) for x in missing):
        raise _Bad("missing: wants strings")
    return Manifest(
        produced_by=_str(produced, "by", "produced"), produced_at=_str(produced, "at", "produced"),
        flow=flow_fields, files=files, mails=mails, proofs=proofs,
        result=None if result is None else _path(result, "result", files), missing=tuple(missing),
        refunds=refunds, job=None if job is None else _path(job, "job", files),
    )


def read_manifest(data: bytes, seal: bytes | None) -> Manifest | ManifestError:
    """The manifest of a folder from its two files' bytes (`seal` None: absent)."""
    if seal is None:
        return ManifestError("tampered", f"{SEAL} is missing")
    digest = sha256_hex(data).encode("ascii")
    if seal not in (digest, digest + b"\n"):  # exactly: a changed byte anywhere is a change
        return ManifestError("tampered", f"{MANIFEST} does not match {SEAL}")
    try:
        return _manifest(loads(data))
    except OutsideJsonError as exc:
        return ManifestError("unreadable", f"{MANIFEST}: {exc}")
    except _Bad as exc:
        return ManifestError("unreadable", f"{MANIFEST}: {exc}")
