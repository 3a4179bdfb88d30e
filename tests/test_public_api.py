"""The public surfaces other code is written against are pinned, by the list README's
"The public Python API" section gives for each module."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _documented(module: str) -> list[str]:
    paragraph = README.read_text().split(f"<!-- api:{module} -->\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"`(\w+)`", paragraph.split(":", 1)[1])


@pytest.mark.parametrize(
    "module", ["envelopay", "envelopay.protocol", "envelopay.engine", "envelopay.testing"]
)
def test_exports_are_pinned_by_the_readme(module: str) -> None:
    # A change to either side fails here: the README list is the pin users read.
    mod = importlib.import_module(module)
    documented = _documented(module)
    assert len(documented) >= 5, documented
    assert sorted(mod.__all__) == sorted(documented)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, name


def test_top_level_reexports_the_protocol_objects() -> None:
    import envelopay
    import envelopay.protocol

    assert envelopay.parse is envelopay.protocol.parse
