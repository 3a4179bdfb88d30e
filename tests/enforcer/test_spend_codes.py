"""Every reason code the spend enforcer can answer with is specified in SPEC.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "envelopay" / "enforcer" / "spend"
SPEC = (ROOT / "SPEC.md").read_text()
_LITERAL = re.compile(
    r'(?:_?blocked|_held)\("([a-z_]+)"|Refusal\(\s*"[a-z_]+",\s*"([a-z_]+)"|_fail\(\s*p,\s*i,\s*"([a-z_]+)"'
    r'|^[A-Z_]+ = "(invoice_[a-z_]+)"|code ?= ?"([a-z_]+)"',
    re.MULTILINE,
)


def spend_codes() -> set[str]:
    codes: set[str] = set()
    for path in sorted(SRC.glob("*.py")):  # the spend room, however its modules are cut
        for match in _LITERAL.finditer(path.read_text()):
            codes.update(g for g in match.groups() if g)
    # Composed in decide.cap_steps from the window names, or named in its table.
    codes |= {f"{w}_cap_{s}" for w in ("hourly", "daily") for s in ("reached", "zero")}
    codes |= {"mail_hourly_cap", "mail_daily_cap", "mail_cap_zero"}
    return codes


def test_every_spend_code_is_specified() -> None:
    codes = spend_codes()
    assert len(codes) > 25  # the scan found the codes
    assert {
        "unknown_asset",
        "payee_not_allowed",
        "invoice_dkim_misaligned",
        "killed",
        "expired",
        "recipient_not_allowed",
        "store_error",
    } <= codes
    missing = sorted(c for c in codes if f"`{c}`" not in SPEC)
    assert missing == []
