"""The conformance corpus: complete, reproducible, and passed by this engine."""

from __future__ import annotations

import importlib.util
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from envelopay.protocol import OopsCode
from envelopay.testing.conformance import (
    CORE_KEYS,
    FORMAT,
    Vector,
    compare,
    default_root,
    engine_parse,
    load_manifest,
    run_manifest,
    run_vector,
)

ROOT = default_root()
TYPES = ["which", "methods", "pay", "order", "fulfill", "invoice", "offer", "accept", "oops"]
PARSE_CODES = [
    "unknown_type",
    "invalid_json",
    "missing_field",
    "invalid_field",
    "type_mismatch",
    "unsupported_version",
    "missing_wallet",
]


@pytest.fixture(scope="module")
def vectors() -> list[Vector]:
    return load_manifest()


def test_engine_passes_the_whole_corpus(vectors: list[Vector]) -> None:
    report = run_manifest(vectors)
    failures = [(r.vector.file, r.mismatches) for r in report.results if not r.ok]
    assert failures == []
    assert report.summary() == f"{len(vectors)} passed, 0 failed"


def test_corpus_size_and_files(vectors: list[Vector]) -> None:
    assert len(vectors) >= 150
    listed = {v.file for v in vectors}
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.eml")}
    assert listed == on_disk
    for v in vectors:
        assert v.rule and set(CORE_KEYS) <= set(v.expect)


def test_generator_reproduces_the_committed_corpus() -> None:
    spec = importlib.util.spec_from_file_location("conformance_generate", ROOT / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    files, manifest = module.build()
    assert (ROOT / "manifest.json").read_text(encoding="utf-8") == module.manifest_text(manifest)
    for name, raw in files.items():
        assert (ROOT / name).read_bytes() == raw, name


def test_coverage(vectors: list[Vector]) -> None:
    valid_types = {v.expect["type"] for v in vectors if v.expect["valid"]}
    invalid_types = {v.expect["type"] for v in vectors if not v.expect["valid"] and v.expect["type"]}
    assert set(TYPES) <= valid_types and set(TYPES) - {"which"} <= invalid_types
    assert "which" in invalid_types  # e.g. a WHICH body without `v`
    assert set(PARSE_CODES) <= {v.expect["oops"] for v in vectors}
    carried = {
        v.expect["body"]["error"]["code"]
        for v in vectors
        if v.expect["type"] == "oops" and v.expect["valid"] and v.expect["body"].get("error")
    }
    assert {c.value for c in OopsCode} <= carried
    assert any(not v.expect["protocol"] for v in vectors)
    assert any(v.options.get("re_prefix") == "v0.2" for v in vectors)
    raws = [v.raw() for v in vectors]
    for marker in [
        b"application/json",
        b"text/html",
        b"Content-Transfer-Encoding: base64",
        b"Content-Transfer-Encoding: quoted-printable",
        b"=?utf-8?",
        b"\r\n> ",
        b"\r\n-- \r\n",
        b"message/rfc822",
        b"multipart/alternative",
    ]:
        assert any(marker in r for r in raws), marker


def test_flows_are_ordered_and_threaded(vectors: list[Vector]) -> None:
    flows: dict[str, list[Vector]] = {}
    for v in vectors:
        if v.flow is not None:
            flows.setdefault(v.flow, []).append(v)
    assert {"first-contact", "order-work", "free-work", "invoice", "exchange", "pay"} <= set(flows)
    first = [v.expect["type"] for v in sorted(flows["first-contact"], key=lambda v: v.step or 0)]
    assert first == ["which", "methods", "order", "invoice", "pay", "fulfill"]
    for steps in flows.values():
        steps.sort(key=lambda v: v.step or 0)
        assert [v.step for v in steps] == list(range(1, len(steps) + 1))
        for prev, cur in itertools.pairwise(steps):
            assert cur.expect["in_reply_to"] == prev.expect["message_id"]
            assert Path(cur.file).parent == Path(prev.file).parent


def test_runner_reports_failures_and_never_raises(vectors: list[Vector]) -> None:
    def liar(raw: bytes, options: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**engine_parse(raw, options), "valid": True}

    def crasher(raw: bytes, options: Mapping[str, Any]) -> Mapping[str, Any]:
        raise RuntimeError("boom")

    sample = vectors[:40]
    report = run_manifest(sample, liar)
    invalid = sum(1 for v in sample if not v.expect["valid"])
    assert report.failed == invalid and report.passed == len(sample) - invalid
    res = run_vector(sample[0], crasher)
    assert not res.ok and "RuntimeError" in res.mismatches[0]


def test_compare_names_each_differing_key() -> None:
    assert compare({"a": 1, "b": None}, {"a": 1, "b": None}) == []
    assert compare({"a": 1, "b": 2}, {"a": 1}) == ['b: expected 2, got "<absent>"']


def test_load_manifest_refuses_other_formats(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other", "vectors": []}))
    with pytest.raises(ValueError, match=FORMAT):
        load_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(
        json.dumps({"format": FORMAT, "vectors": [{"file": "x.eml", "expect": {}}]})
    )
    with pytest.raises(ValueError, match="expect"):
        load_manifest(tmp_path)
