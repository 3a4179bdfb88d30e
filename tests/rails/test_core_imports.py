"""The rail core stays chain-free: importing the interface, the registry, the CLI module
and the conformance kit loads no chain library (a subprocess gives a clean import state)."""

from __future__ import annotations

import json
import subprocess
import sys

CHAIN_LIBS = ("solana", "solders", "spl", "web3", "eth_tester", "eth_account",
              "envelopay_solana", "envelopay_base")


def test_core_imports_no_chain_library() -> None:
    code = (
        "import json, sys\n"
        "import envelopay.rails.interface, envelopay.rails.registry, envelopay.testing.rails\n"
        "import envelopay.cli.rails_cmds\n"
        "envelopay.rails.registry.discover()\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True)
    loaded = set(json.loads(out.stdout))
    assert "envelopay" in loaded
    assert not loaded & set(CHAIN_LIBS), loaded & set(CHAIN_LIBS)
