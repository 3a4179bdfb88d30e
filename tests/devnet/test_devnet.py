"""The devnet in-process: it starts every service, writes one state file, accepts mail for
agents registered after it started, serves their DKIM records, funds wallets on both
chains, and removes its state when it stops."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from eth_account import Account
from solders.keypair import Keypair

from envelopay.devnet import registry
from envelopay.devnet.fund import FEE_ETH, FEE_SOL, fund, plan_funding, to_units
from envelopay.devnet.run import DevnetOptions, describe, probe, run_devnet
from envelopay.devnet.state import DevnetState, read_state, state_path
from envelopay.errors import ConfigError, UsageError

FAST = DevnetOptions(solana_port=0, base_port=0, slot_time=0.05, confirmed_after=1, finalized_after=4,
                     block_time=0.2)


@contextlib.asynccontextmanager
async def devnet(home: Path, base_node: str = "auto") -> AsyncIterator[DevnetState]:
    stop = asyncio.Event()
    lines: list[str] = []
    from dataclasses import replace

    task = asyncio.create_task(run_devnet(home, replace(FAST, base_node=base_node), stop=stop,
                                          echo=lines.append))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while not state_path(home).exists():
        assert not task.done(), task.exception() if task.done() else ""
        assert loop.time() < deadline, "the devnet did not come up"
        await asyncio.sleep(0.02)
    try:
        yield read_state(home)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert lines[-1] == "devnet stopped"


@pytest.mark.parametrize("base_node", ["anvil", "eth-tester"])
async def test_up_fund_down(tmp_path: Path, base_node: str) -> None:
    home = tmp_path / "devnet"
    async with devnet(home, base_node) as state:
        assert state.base.node == base_node
        assert [line.split()[0] for line in describe(state)] == ["solana", "base", "garden", "dkim", "state"]
        answers = await probe(state)
        assert answers["solana"].startswith("ok slot") and answers["base"].startswith("ok block")
        assert answers["garden"] == "ok"
        solana_wallet = str(Keypair().pubkey())
        base_wallet = Account.create().address
        registry.register_agent(home, registry.AgentEntry(
            "buyer@garden.local", ("buyer@garden.local",), {"buyer._domainkey.garden.local": "v=DKIM1; p=x"},
            {"solana-local": solana_wallet, "base-local": base_wallet}))
        plan = plan_funding(home, "buyer@garden.local", sol=None, eth=None, usdc="100", chain=None)
        assert (plan.lamports, plan.solana_usdc, plan.wei, plan.base_usdc) == (FEE_SOL, 100_000_000, FEE_ETH,
                                                                               100_000_000)
        done = await fund(state, plan)
        assert [d.chain for d in done] == ["solana-local", "base-local"]
        from envelopay_base.devchain import DevChain

        async with DevChain(state.base.rpc_url) as dev:
            assert await dev.token_balance(base_wallet) == 100_000_000
            assert await dev.eth_balance(base_wallet) == FEE_ETH
        sol_only = plan_funding(home, solana_wallet, sol="1.5", eth=None, usdc=None, chain=None)
        assert sol_only.base_wallet is None and sol_only.lamports == 1_500_000_000
        await fund(state, sol_only)
        import httpx

        async with httpx.AsyncClient() as client:
            balance = (await client.post(state.solana.rpc_url, json={
                "jsonrpc": "2.0", "id": 1, "method": "getBalance", "params": [solana_wallet]})).json()
        assert balance["result"]["value"] == FEE_SOL + 1_500_000_000
    assert not state_path(home).exists()
    with pytest.raises(ConfigError, match="no devnet is running"):
        read_state(home)


async def test_garden_and_dns_follow_the_registry(tmp_path: Path) -> None:
    from envelopay.mail.garden import LmtpClient
    from envelopay.mail.garden_auth import new_secret, secret_hash

    home = tmp_path / "devnet"
    async with devnet(home, "eth-tester") as state:
        secret = new_secret()
        registry.register_agent(home, registry.AgentEntry(
            "a@garden.local", ("a@garden.local",), {}, {}, secret_hash(secret)))
        # Registered a moment ago: the garden re-reads the registry on an unknown login.
        client = LmtpClient(Path(state.garden_socket), auth=("a@garden.local", secret))
        await client.connect()
        raw = b"From: a@garden.local\r\nTo: late@garden.local\r\nSubject: WHICH\r\n\r\nhi\r\n"
        dns = registry.devnet_dns(home)
        assert await dns("late._domainkey.garden.local") is None
        refused = await client.send(raw, "a@garden.local", ["nobody@garden.local"])
        assert tuple(refused.refused) == ("nobody@garden.local",)
        registry.register_agent(home, registry.AgentEntry(
            "late@garden.local", ("late@garden.local", "kv@garden.local"),
            {"late._domainkey.garden.local": "v=DKIM1; k=rsa; p=AAAA"}, {}))
        assert await dns("LATE._domainkey.garden.local.") == "v=DKIM1; k=rsa; p=AAAA"
        # Registered a moment ago: the garden re-reads the registry on an unknown recipient.
        result = await client.send(raw, "a@garden.local", ["late@garden.local", "kv@garden.local"])
        assert not result.refused, result
        await client.close()
        inbox = Path(state.garden_root)
        assert any(inbox.rglob("new/*")), "the message landed in a Maildir under the garden root"


async def test_a_second_devnet_on_the_same_home_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "devnet"
    async with devnet(home, "eth-tester"):
        with pytest.raises(ConfigError, match="already runs"):
            await run_devnet(home, FAST, stop=asyncio.Event(), echo=lambda _: None)


def test_amounts_and_targets_are_checked(tmp_path: Path) -> None:
    assert to_units("1", 9, "sol") == 10**9 and to_units("0.000001", 6, "usdc") == 1
    for bad in ("-1", "abc", "0.0000001", "nan", "inf"):
        with pytest.raises(UsageError):
            to_units(bad, 6, "usdc")
    with pytest.raises(UsageError, match="neither"):
        plan_funding(tmp_path, "not-a-wallet", sol="1", eth=None, usdc=None, chain=None)
    with pytest.raises(UsageError, match="nothing to fund"):
        plan_funding(tmp_path, str(Keypair().pubkey()), sol=None, eth=None, usdc=None, chain=None)
    with pytest.raises(UsageError, match="no Base wallet"):
        plan_funding(tmp_path, str(Keypair().pubkey()), sol=None, eth="1", usdc=None, chain=None)
    with pytest.raises(ConfigError, match="not registered"):
        plan_funding(tmp_path, "nobody@garden.local", sol="1", eth=None, usdc=None, chain=None)


async def test_devnet_garden_refuses_an_insider_sending_from_another_agent(tmp_path: Path) -> None:
    """The default devnet setup (issue 11, item 9): agents `init --devnet` registers each
    have their own garden secret; one of them cannot send From another."""
    from envelopay.mail.garden import deliver
    from envelopay.mail.garden_auth import add_account, authenticated_sender, read_secret
    from envelopay.node.init import init_agent

    home = tmp_path / "devnet"
    async with devnet(home, "eth-tester") as state:
        worker = init_agent(tmp_path / "worker", address="worker@garden.local", devnet=state)
        buyer = init_agent(tmp_path / "buyer", address="buyer@garden.local", devnet=state)
        assert worker.garden_secret is not None and buyer.garden_secret is not None
        creds = ("buyer@garden.local", read_secret(buyer.garden_secret))
        sock = Path(state.garden_socket)
        box = Path(state.garden_root) / "worker@garden.local" / "new"

        forged = b"From: worker@garden.local\r\nTo: worker@garden.local\r\nSubject: FULFILL\r\n\r\n{}\r\n"
        refused = await deliver(forged, "buyer@garden.local", ["worker@garden.local"], sock, auth=creds)
        assert refused.delivered == ()
        answer = refused.replies["worker@garden.local"]
        assert answer.code == 550
        assert answer.text == "5.7.1 buyer@garden.local may not send From worker@garden.local"
        assert not list(box.iterdir())

        own = b"From: buyer@garden.local\r\nTo: worker@garden.local\r\nSubject: WHICH\r\n\r\nhi\r\n"
        ok = await deliver(own, "buyer@garden.local", ["worker@garden.local"], sock, auth=creds)
        assert ok.delivered == ("worker@garden.local",)
        [stored] = list(box.iterdir())
        assert authenticated_sender(stored.read_bytes(), authserv_id="garden.local") == "buyer@garden.local"

        # A sender that is no agent (the enforcer, for its agents' addresses) is listed in
        # <home>/garden-accounts.json, picked up on its first login.
        enforcer = add_account(home / "garden-accounts.json", "enforcer", ["buyer@garden.local"])
        as_enforcer = ("enforcer", enforcer)
        via = await deliver(own, "buyer@garden.local", ["worker@garden.local"], sock, auth=as_enforcer)
        assert via.delivered == ("worker@garden.local",)
        users = {authenticated_sender(f.read_bytes(), authserv_id="garden.local") for f in box.iterdir()}
        assert users == {"buyer@garden.local", "enforcer"}


def test_an_exited_unreaped_process_is_not_alive() -> None:
    """`devnet down` waits until the devnet's process is gone; a devnet started by the
    caller's own process stays a zombie until reaped, and must count as stopped."""
    import subprocess
    import time as _time

    from envelopay.devnet.state import pid_alive

    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(proc.pid)
        proc.kill()
        deadline = _time.monotonic() + 10
        while pid_alive(proc.pid):  # the zombie is not reaped: only its state says it exited
            assert _time.monotonic() < deadline, "a killed child still counts as alive"
            _time.sleep(0.01)
        assert proc.returncode is None  # still unreaped when pid_alive said it ended
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)
