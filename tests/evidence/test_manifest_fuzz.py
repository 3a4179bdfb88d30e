"""The evidence manifest is outside input (a folder someone hands over): its reader answers
every text with a Manifest or a ManifestError, never an exception, and `check_evidence`
over a folder with such a manifest answers a report, never an exception (the fuzz corpus
of issue 29, tests/fuzz_json.py: every field given every JSON type, nesting past the
limit, long numbers, lone surrogates, duplicate keys, invalid UTF-8, truncations)."""

from __future__ import annotations

import hashlib
import os

from tests.fuzz_json import texts

from envelopay.client.evidence_check import check_evidence
from envelopay.client.evidence_manifest import FORMAT, Manifest, ManifestError, read_manifest

N = int(5_000 * float(os.environ.get("ENVELOPAY_FUZZ_SCALE", "1")))
GOOD = {
    "format": FORMAT,
    "produced": {"by": "w@x.test", "side": "payee", "at": "2026-12-01T10:00:00+00:00"},
    "flow": {"id": "f1", "kind": "order", "side": "payee", "state": "fulfilled", "local": "w@x.test",
             "peer": "b@y.test"},
    "files": {"mails/01-order-in.eml": "0" * 64, "keys/01.json": "1" * 64, "proofs/01-p.json": "2" * 64,
              "result.json": "3" * 64},
    "mails": [{"file": "mails/01-order-in.eml", "message_id": "<m@y.test>", "direction": "in",
               "type": "order", "at": "2026-12-01T10:00:00+00:00", "keys": ["keys/01.json"]}],
    "proofs": ["proofs/01-p.json"],
    "result": "result.json",
    "missing": [],
}


def _sealed(text: str | bytes) -> tuple[bytes, bytes]:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return data, hashlib.sha256(data).hexdigest().encode()


def test_the_good_manifest_reads() -> None:
    import json

    got = read_manifest(*_sealed(json.dumps(GOOD)))
    assert isinstance(got, Manifest) and got.mails[0].keys == ("keys/01.json",)
    for bad_path in ("../etc/passwd", "/abs", "mails/../x", "other/x", "mails/"):
        doc = {**GOOD, "files": {bad_path: "0" * 64}}
        refused = read_manifest(*_sealed(json.dumps(doc)))
        assert isinstance(refused, ManifestError) and refused.code == "unreadable", bad_path
    assert read_manifest(b"{}", b"0" * 64) == ManifestError("tampered", "manifest.json does not match "
                                                                        "manifest.sha256")


def test_every_hostile_manifest_is_a_value_never_an_exception() -> None:
    kinds: dict[str, int] = {}
    for i, text in enumerate(texts(31, N, GOOD)):
        data, seal = _sealed(text)
        got = read_manifest(data, seal)
        assert isinstance(got, Manifest | ManifestError)
        kind = type(got).__name__ if isinstance(got, Manifest) else got.code
        kinds[kind] = kinds.get(kind, 0) + 1
        if i % 10 == 0:  # the whole check over the same manifest: a report, never a raise
            report = check_evidence({"manifest.json": data, "manifest.sha256": seal})
            assert not report.ok and report.reason in ("unreadable", "tampered")
    assert kinds.get("unreadable", 0) > N // 4 and kinds.get("Manifest", 0) > 0, kinds
