"""Compile Token.vy with vyper (from PyPI) into the artifact the rail loads at runtime.

Run from anywhere: `.venv/bin/python rails/base/contracts/build.py`. The rail never
compiles at runtime; it reads src/envelopay_base/contracts/token.json, committed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "Token.vy"
ARTIFACT = HERE.parent / "src" / "envelopay_base" / "contracts" / "token.json"


def _vyper() -> str:
    # Prefer the vyper beside this interpreter (the venv), then PATH.
    beside = Path(sys.executable).parent / "vyper"
    if beside.exists():
        return str(beside)
    found = shutil.which("vyper")
    if found is None:
        raise SystemExit("vyper not found: pip install vyper==0.4.3")
    return found


def build() -> dict[str, object]:
    vyper = _vyper()
    version = subprocess.run([vyper, "--version"], check=True, capture_output=True, text=True).stdout.strip()
    out = subprocess.run(
        [vyper, "-f", "abi,bytecode", str(SOURCE)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    abi = json.loads(out[0])
    bytecode = out[1].strip()
    if not bytecode.startswith("0x"):
        raise SystemExit(f"unexpected vyper output: {out[1][:40]!r}")
    return {"contract": "Token", "source": "rails/base/contracts/Token.vy", "compiler": f"vyper {version}",
            "abi": abi, "bytecode": bytecode}


def main() -> None:
    artifact = build()
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    ARTIFACT.write_text(json.dumps(artifact, indent=1) + "\n")
    print(f"wrote {ARTIFACT} ({len(str(artifact['bytecode'])) // 2 - 1} bytes of bytecode)")


if __name__ == "__main__":
    main()
