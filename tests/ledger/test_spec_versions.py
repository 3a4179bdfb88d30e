"""SPEC.md's "schema vN" lines against the ledger's migrations: where SPEC names a table,
an index or a column (`ep_...`) beside a schema version, that version's migration is the
one that made it (a line that said v5 for the v9 waiting table went unnoticed); every
version SPEC names exists (the jobs table's, "jobs schema vN", its own component's)."""

from __future__ import annotations

import re
from pathlib import Path

from envelopay.ledger.jobs import JOBS_MIGRATIONS
from envelopay.ledger.schema import MIGRATIONS

SPEC = (Path(__file__).resolve().parents[2] / "SPEC.md").read_text(encoding="utf-8")
_MENTION = re.compile(r"(up to\s+)?(jobs\s+)?schema\s+v(\d+)")
_NAME = re.compile(r"`(ep_[a-z_]+(?:\.[a-z_]+)?)`")


def _claims(text: str, component: str = "ledger") -> list[tuple[int, int, list[str]]]:
    """(line, version, names) per mention of `component`'s schema: the names of its bullet
    or paragraph up to the mention and of the rest of its sentence. "up to vN" says what
    vN+1 changed."""
    out: list[tuple[int, int, list[str]]] = []
    for m in _MENTION.finditer(text):
        if (m.group(2) is not None) != (component == "jobs"):
            continue
        start = max(0, text.rfind("\n\n", 0, m.start()), text.rfind("\n- ", 0, m.start()))
        end = min(i for i in (text.find(". ", m.end()), text.find(";", m.end()), len(text)) if i >= 0)
        version = int(m.group(3)) + (1 if m.group(1) else 0)
        out.append((text.count("\n", 0, m.start()) + 1, version, _NAME.findall(text[start:end])))
    return out


def _made_by(sql: str, name: str) -> bool:
    return all(re.search(rf"\b{re.escape(part)}\b", sql) for part in name.split("."))


def test_each_versioned_name_is_made_by_that_migration() -> None:
    sql = {version: text for version, _, text in MIGRATIONS}
    claims = [c for c in _claims(SPEC) if c[2]]
    wrong = [(line, f"v{v}", names) for line, v, names in claims
             if not any(_made_by(sql.get(v, ""), n) for n in names)]
    assert wrong == []
    checked = {n for _, _, names in claims for n in names}
    assert {"ep_deferrals", "ep_outbox_due", "ep_outbox.bounce_status"} <= checked


def test_each_version_named_exists() -> None:
    ledger = {version for version, _, _ in MIGRATIONS}
    assert [c for c in _claims(SPEC) if c[1] not in ledger] == []
    said = _claims(SPEC, "jobs")
    assert said and [c for c in said if c[1] not in {step.version for step in JOBS_MIGRATIONS.steps}] == []


def test_the_check_sees_a_wrong_version() -> None:
    # The check itself: the waiting table under the version SPEC once gave it is caught.
    assert [c[1:] for c in _claims("- a *waiting* row (table `ep_deferrals`; schema v5).")] == [
        (5, ["ep_deferrals"])]
    assert not _made_by({v: t for v, _, t in MIGRATIONS}[5], "ep_deferrals")
    assert _made_by({v: t for v, _, t in MIGRATIONS}[9], "ep_deferrals")
