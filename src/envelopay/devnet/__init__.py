"""`envelopay devnet`: the shared local world two or more agents on one machine use.

One process (`run.run_devnet`) serves, on loopback:

- a Solana JSON-RPC node (LiteSVM) with the local USDC and PYUSD mints, on a slot clock;
- a Base JSON-RPC node: anvil when installed, else the eth-tester node, on a block clock,
  with the local USDC deployed;
- the walled garden (LMTP on a Unix socket → Maildirs) for every address registered by
  `envelopay init --devnet`;
- a DNS table for the DKIM records of those agents (`registry.devnet_dns`).

Its endpoints go to one state file (`state.STATE_FILE` under `state.devnet_home()`),
which every command reads. Funding (`fund.fund_wallets`) works against it only.
"""

from __future__ import annotations

from envelopay.devnet.state import DevnetState, devnet_home, read_state

__all__ = ["DevnetState", "devnet_home", "read_state"]
