"""A serving node loads before its first message what handling it would load on first use
(AgentNode.warm): before, the first customer's mail stalled every message on the event
loop for ~0.3 s while dkimpy, dnspython's HTTP stack and aiohttp imported
(bench/RESULTS.md "jobs", 2026-12-05)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from solders.keypair import Keypair

from envelopay.config import load_config
from envelopay.node.agent_node import build_node
from envelopay.node.init import init_agent
from envelopay.rails.registry import make
from envelopay.testing import MockTransport

SERVE_ONCE = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from envelopay.config import load_config
    from envelopay.node.agent_node import build_node
    from envelopay.node.init import init_agent
    from envelopay.testing import MockTransport

    home = Path(sys.argv[1])
    init_agent(home, address="worker@garden.local")
    node = build_node(load_config(home / "envelopay.toml"), transport=MockTransport())
    print("before", "dkim" in sys.modules)

    async def main() -> None:
        stop = asyncio.Event()
        stop.set()  # serve warms, then its pump sees stop and ends: no message handled
        await node.serve(stop)
        print("after", "dkim" in sys.modules)
        await node.close()

    asyncio.run(main())
""")


def test_serve_loads_the_dkim_verifier_before_any_message(tmp_path: Path) -> None:
    # A fresh interpreter: this one imported dkimpy long ago.
    out = subprocess.run([sys.executable, "-c", SERVE_ONCE, str(tmp_path / "w")], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split("\n")
    assert "before False" in out and "after True" in out, out


SPEND_START = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from envelopay.dkim import table_dns
    from envelopay.enforcer.send.enforcer import Enforcer
    from envelopay.enforcer.service.launch import prepare
    from envelopay.enforcer.service.spend_launch import prepare_spend, start_payments

    home = Path(sys.argv[1])
    (home / "inbox").mkdir(parents=True)
    launch = prepare(db=f"sqlite:///{home}/e.db", token_file=home / "token", garden=str(home / "garden.sock"),
                     smtp_host=None, smtp_port=587, smtp_security="starttls", smtp_user=None, dkim_key=None,
                     dkim_selector="x", dkim_domain=None, env={})
    spend = prepare_spend(vault_key_file=None, pay_rails=[], inbox_root=home / "inbox", dns=table_dns({}),
                          env={})
    assert spend is not None
    print("before", "dkim" in sys.modules)

    async def main() -> None:
        await launch.store.open()
        await start_payments(spend, Enforcer(launch.store, launch.transport, operator_token_hash="x"))
        print("after", "dkim" in sys.modules)
        await launch.store.close()

    asyncio.run(main())
""")


def test_the_spend_enforcer_loads_the_verifier_when_it_checks_invoices(tmp_path: Path) -> None:
    """Its first payment checks an INVOICE's DKIM: loaded at start, as the node does."""
    out = subprocess.run([sys.executable, "-c", SPEND_START, str(tmp_path / "e")], capture_output=True,
                         text=True, timeout=120, check=True).stdout.split("\n")
    assert "before False" in out and "after True" in out, out


def _aiohttp_rail() -> object:
    # Port 9 (discard) on loopback: nothing answers, and warming must not call it.
    return make("solana", {"backend": "rpc", "network": "local", "rpc_url": "http://127.0.0.1:9/",
                           "keypair": bytes(Keypair()), "rpc_transport": "aiohttp"})


async def test_warm_opens_each_rails_client_without_a_call(tmp_path: Path) -> None:
    init_agent(tmp_path, address="worker@garden.local")
    rail = _aiohttp_rail()
    node = build_node(load_config(tmp_path / "envelopay.toml"), transport=MockTransport(),
                      rails={"solana-local": rail})  # type: ignore[dict-item]
    poster = rail.rpc._poster  # type: ignore[attr-defined]
    assert poster._session is None  # made on first use, as before
    await node.warm()
    assert poster._session is not None and not poster._session.closed
    await node.warm()  # twice is once: the same session
    session = poster._session
    await node.warm()
    assert poster._session is session
    await node.close()
    assert poster._session is None

