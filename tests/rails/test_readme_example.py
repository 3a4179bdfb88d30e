"""The Python example in README's rails section runs as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


async def test_readme_rails_example_runs() -> None:
    text = README.read_text()
    section = text[text.index("<!-- section:rails -->"):text.index("<!-- /section:rails -->")]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    body = textwrap.indent(code.group(1), "    ")
    namespace: dict[str, object] = {}
    exec(compile(f"async def example():\n{body}\n    return verdict\n", "README.md", "exec"), namespace)
    verdict = await namespace["example"]()  # type: ignore[operator]
    assert verdict.ok and verdict.observed_amount == 1_000_000  # type: ignore[attr-defined]
