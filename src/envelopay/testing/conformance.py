"""The conformance corpus runner: load the manifest, run one vector against a parse
function, compare. Each step is separate so a front end can run the same vectors
against another implementation (a live address, another parser).

Manifest format: SPEC.md, "Conformance corpus". In short, `manifest.json` is
``{"format": "envelopay-conformance/1", "vectors": [{"file", "rule", "options",
"expect", "flow"?}]}``; `expect` holds the `parse --json` keys a conforming parser
must produce, and only the keys present are compared. A vector may add
`expect_lenient` (the outcome under the `lenient` interop profile, when it differs)
and `lenient_only: true` (valid only under the profile).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from envelopay.protocol.parse import ParseOptions, parse

__all__ = [
    "CORE_KEYS",
    "FORMAT",
    "PROFILES",
    "ParseFn",
    "Profile",
    "Report",
    "Vector",
    "VectorResult",
    "compare",
    "default_root",
    "engine_parse",
    "expected_outcome",
    "load_manifest",
    "run_manifest",
    "run_vector",
    "vector_options",
]

FORMAT = "envelopay-conformance/1"
# Every vector's `expect` carries these seven keys (the `parse --json` contract).
CORE_KEYS: tuple[str, ...] = ("protocol", "type", "valid", "oops", "id", "message_id", "body")

ParseFn = Callable[[bytes, Mapping[str, Any]], Mapping[str, Any]]
"""A parser under test: (raw bytes, vector options) -> its `parse --json` object.
Under a profile the options carry `"profile": "lenient"`."""
Profile = Literal["strict", "lenient"]
PROFILES: tuple[Profile, ...] = ("strict", "lenient")


@dataclass(frozen=True, slots=True)
class Vector:
    """One raw message and what a conforming receiver makes of it."""

    file: str  # path relative to the manifest's directory
    rule: str  # the spec rule (or documented decision) this vector tests
    expect: Mapping[str, Any]
    options: Mapping[str, Any] = field(default_factory=dict)
    flow: str | None = None  # name of the flow sequence this message belongs to
    step: int | None = None  # 1-based position within that flow
    root: Path = Path()
    expect_lenient: Mapping[str, Any] | None = None  # the outcome under `lenient`, when it differs
    lenient_only: bool = False  # valid only under the `lenient` profile

    @property
    def path(self) -> Path:
        return self.root / self.file

    def raw(self) -> bytes:
        return self.path.read_bytes()


@dataclass(frozen=True, slots=True)
class VectorResult:
    vector: Vector
    mismatches: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches


@dataclass(frozen=True, slots=True)
class Report:
    results: tuple[VectorResult, ...]

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.ok)

    @property
    def failed(self) -> int:
        return len(self.results) - self.passed

    def summary(self) -> str:
        """The last line of every conformance run."""
        return f"{self.passed} passed, {self.failed} failed"


def default_root() -> Path:
    """fixtures/conformance of this source tree."""
    return Path(__file__).resolve().parents[3] / "fixtures" / "conformance"


def load_manifest(root: Path | None = None) -> list[Vector]:
    """Read `root/manifest.json`. Raises ValueError when the manifest is malformed."""
    base = root if root is not None else default_root()
    data = json.loads((base / "manifest.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{base / 'manifest.json'}: not an {FORMAT} manifest")
    vectors: list[Vector] = []
    for i, entry in enumerate(data.get("vectors", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise ValueError(f"vector {i}: needs a `file`")
        expect = entry.get("expect")
        if not isinstance(expect, dict) or any(k not in expect for k in CORE_KEYS):
            raise ValueError(f"vector {entry['file']}: `expect` needs {', '.join(CORE_KEYS)}")
        vectors.append(
            Vector(
                file=entry["file"],
                rule=str(entry.get("rule", "")),
                expect=expect,
                options=entry.get("options") or {},
                flow=entry.get("flow"),
                step=entry.get("step"),
                root=base,
                expect_lenient=entry.get("expect_lenient"),
                lenient_only=bool(entry.get("lenient_only", False)),
            )
        )
    return vectors


def expected_outcome(vector: Vector, profile: Profile = "strict") -> Mapping[str, Any]:
    """What a conforming parser must report for this vector (the keys to compare)."""
    if profile == "lenient" and vector.expect_lenient is not None:
        return vector.expect_lenient
    return vector.expect


def vector_options(vector: Vector, profile: Profile = "strict") -> Mapping[str, Any]:
    """The receiver options a vector runs with under `profile`."""
    return {**vector.options, "profile": profile} if profile != "strict" else vector.options


def compare(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """One line per expected key whose actual value differs."""
    out: list[str] = []
    for key, want in expected.items():
        got = actual.get(key, "<absent>")
        if got != want:
            out.append(f"{key}: expected {json.dumps(want)}, got {json.dumps(got, default=str)}")
    return out


def engine_parse(raw: bytes, options: Mapping[str, Any]) -> Mapping[str, Any]:
    """This engine as a ParseFn."""
    re_prefix = options.get("re_prefix", "v0.1")
    if re_prefix not in ("v0.1", "v0.2"):
        raise ValueError(f"unknown re_prefix option {re_prefix!r}")
    profile = options.get("profile", "strict")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}")
    extensions = options.get("extensions", [])
    if not isinstance(extensions, list) or not all(isinstance(e, str) for e in extensions):
        raise ValueError(f"extensions option must be a list of names, not {extensions!r}")
    opts = ParseOptions(re_prefix=cast(Literal["v0.1", "v0.2"], re_prefix), profile=cast(Profile, profile),
                        extensions=frozenset(extensions))
    return parse(raw, options=opts).to_json()


def run_vector(vector: Vector, parse_fn: ParseFn = engine_parse, profile: Profile = "strict") -> VectorResult:
    """Run one vector; a parser that raises fails the vector (it must not raise)."""
    try:
        actual = parse_fn(vector.raw(), vector_options(vector, profile))
    except Exception as exc:  # the parser under test broke; that is a failed vector
        return VectorResult(vector, (f"parser raised {type(exc).__name__}: {exc}",))
    return VectorResult(vector, tuple(compare(expected_outcome(vector, profile), actual)))


def run_manifest(
    vectors: Iterable[Vector], parse_fn: ParseFn = engine_parse, profile: Profile = "strict"
) -> Report:
    """Every vector under `profile`: strict checks `expect`; lenient checks
    `expect_lenient` where a vector has it and `expect` everywhere else."""
    return Report(tuple(run_vector(v, parse_fn, profile) for v in vectors))
