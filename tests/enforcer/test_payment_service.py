"""The spend enforcer as a service: HTTP routes, the operator's wallet and policy calls, the
shared approval queue and console, the MCP payment tools (a real `envelopay mcp`
subprocess), and custody: every output of the run is searched for the wallet key."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import Client
from solders.keypair import Keypair

from envelopay.enforcer.client.payment_client import PaymentClient, SpendOperatorClient
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.vault import Vault, VaultError

from .conftest import OPERATOR, Sink
from .paykit import CHAIN, USDC, Kit, make_kit, payee_wallet
from .test_mcp import _params, _structured


@pytest.fixture
async def paid_service(enforcer: Enforcer) -> AsyncIterator[tuple[str, Kit]]:
    kit = await make_kit(enforcer)
    runner, url = await start_server(enforcer, payments=kit.payments)
    yield url, kit
    await runner.cleanup()


def _encodings(secret: bytes) -> list[str]:
    """Every spelling of the key an output could carry."""
    kp = Keypair.from_bytes(secret)
    seed = secret[:32]
    return [
        secret.hex(),
        seed.hex(),
        base64.b64encode(secret).decode(),
        base64.b64encode(seed).decode(),
        json.dumps(list(secret)),
        json.dumps(list(secret), separators=(",", ":")),
        str(list(secret)),
        str(kp),
        str(Keypair.from_seed(seed)),
        secret.hex().upper(),
    ]


async def test_a_full_run_never_shows_the_wallet_key(
    paid_service: tuple[str, Kit],
    store: EnforcerStore,
    sink: Sink,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    url, kit = paid_service
    outputs: list[str] = []
    key = Keypair()
    secret = bytes(key)
    key_file = tmp_path / "buyer.json"
    key_file.write_text(json.dumps(list(secret)))
    async with SpendOperatorClient(url, OPERATOR) as op:
        agent, token = await op.create_agent("buyer", "buyer@agents.test", allow=("partner.test",))
        outputs.append(json.dumps(agent))
        wallet = await op.add_wallet("buyer", CHAIN, import_file=str(key_file))
        outputs.append(json.dumps(wallet))
        assert wallet["address"] == str(key.pubkey()) and set(wallet) == {"id", "chain", "address", "label"}
        # The same label twice, an unreadable file, a file that is no key: errors that name no key.
        for bad in (str(key_file), str(tmp_path / "missing.json")):
            with pytest.raises(Exception) as err:
                await op.add_wallet("buyer", CHAIN, import_file=bad)
            outputs.append(str(err.value))
        junk = tmp_path / "junk.json"
        junk.write_text(json.dumps(list(secret[:20])))
        with pytest.raises(Exception) as err:
            await op.add_wallet("buyer", CHAIN, label="junk", import_file=str(junk))
        outputs.append(str(err.value))
        fresh = await op.add_wallet("buyer", CHAIN, label="spare")
        outputs.append(json.dumps(fresh) + json.dumps(await op.wallets("buyer")))
        policy = {
            "limits": {f"{CHAIN}/USDC": {"per_payment": 3 * USDC, "daily": 10 * USDC}},
            "payees": ["partner.test"],
        }
        outputs.append(json.dumps(await op.set_policy("buyer", policy)))
        assert (await op.get_policy("buyer"))["limits"][f"{CHAIN}/USDC"]["daily"] == 10 * USDC
        kit.chain.airdrop(wallet["address"], 10**9)
        kit.chain.mint_tokens(wallet["address"], "USDC", 20 * USDC)
        to = payee_wallet()
        async with PaymentClient(url, token) as agent_client:
            paid = await agent_client.submit(
                "pay",
                {
                    "to": "seller@partner.test",
                    "chain": CHAIN,
                    "token": "USDC",
                    "amount": str(USDC),
                    "wallet": to,
                    "idempotency_key": "p1",
                },
            )
            assert paid.status == "paid_and_sent" and paid.tx_id and paid.message_id
            held = await agent_client.submit(
                "pay",
                {
                    "to": "seller@partner.test",
                    "chain": CHAIN,
                    "token": "USDC",
                    "amount": str(5 * USDC),
                    "wallet": to,
                    "idempotency_key": "p2",
                },
            )
            assert (held.status, held.code) == ("pending_approval", "over_payment_max")
            balances = await agent_client.balances()
            outputs += [json.dumps(paid.to_json()), json.dumps(held.to_json()), json.dumps(balances)]
            assert [w["address"] for w in balances["wallets"]] == sorted(
                [wallet["address"], fresh["address"]], key=lambda a: a != wallet["address"]
            )
            assert balances["wallets"][0]["balances"]["USDC"]["amount"] == str(19 * USDC)
            # The agent's token is not an operator credential.
            async with SpendOperatorClient(url, token) as forged:
                with pytest.raises(Exception) as err:
                    await forged.wallets("buyer")
                outputs.append(str(err.value))
        queue = await op.list_approvals()
        outputs.append(json.dumps(queue))
        row = next(r for r in queue if r["id"] == held.approval_id)
        assert (row["amount"], row["amount_human"], row["asset"], row["wallet"], row["code"]) == (
            str(5 * USDC),
            "5",
            f"{CHAIN}/USDC",
            to,
            "over_payment_max",
        )
        # The console shows the held payment with its buttons.
        async with httpx.AsyncClient(base_url=url) as web:
            await web.post("/console/login", data={"token": OPERATOR})
            page = (await web.get("/console")).text
            outputs.append(page)
            assert f"row-{held.approval_id}" in page and "5 USDC (5000000 smallest units)" in page
            assert f"approve-{held.approval_id}" in page and to in page
        code, decision = await op.decide(held.approval_id or "", "approve")
        outputs.append(json.dumps(decision))
        assert code == 200 and decision["disposition"]["status"] == "paid_and_sent"
        code, again = await op.decide(held.approval_id or "", "approve")
        assert code == 409 and again["state"] == "SENT"
    assert kit.usdc_of(to) == 6 * USDC

    # The MCP front: the agent pays, reads balances and statuses, and never sees a key.
    env = {
        "ENVELOPAY_ENFORCER": url,
        "ENVELOPAY_AGENT_TOKEN": token,
        "ENVELOPAY_AGENT_ADDRESS": "buyer@agents.test",
    }
    async with Client(_params(env), read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {
            "pay_invoice",
            "pay",
            "make_offer",
            "accept_offer",
            "balances",
            "check_payment_status",
        } <= names
        mcp_paid = _structured(
            await client.call_tool(
                "pay",
                {
                    "to": "seller@partner.test",
                    "amount": str(2 * USDC),
                    "token": "USDC",
                    "chain": CHAIN,
                    "wallet": to,
                    "idempotency_key": "m1",
                },
            )
        )
        assert mcp_paid["status"] == "paid_and_sent" and mcp_paid["tx_id"] and mcp_paid["message_id"]
        stranger = _structured(
            await client.call_tool(
                "pay",
                {
                    "to": "eve@stranger.test",
                    "amount": str(USDC),
                    "token": "USDC",
                    "chain": CHAIN,
                    "wallet": payee_wallet(),
                    "idempotency_key": "m2",
                },
            )
        )
        assert stranger["status"] == "pending_approval"
        offer = _structured(
            await client.call_tool(
                "make_offer",
                {
                    "to": "seller@partner.test",
                    "amount": str(USDC),
                    "token": "USDC",
                    "chain": CHAIN,
                    "wallet": to,
                    "want": {"amount": "5", "token": "SOL", "chain": CHAIN},
                    "idempotency_key": "o1",
                },
            )
        )
        assert offer["status"] == "paid_and_sent"
        accept = _structured(
            await client.call_tool(
                "accept_offer",
                {
                    "to": "seller@partner.test",
                    "offer_ref": "their-offer",
                    "amount": str(USDC),
                    "token": "USDC",
                    "chain": CHAIN,
                    "wallet": to,
                    "idempotency_key": "a1",
                },
            )
        )
        assert accept["status"] == "paid_and_sent"
        status = _structured(await client.call_tool("check_payment_status", {"id": mcp_paid["id"]}))
        assert status["tx_id"] == mcp_paid["tx_id"]
        unknown = _structured(await client.call_tool("check_payment_status", {"id": "not-mine"}))
        assert unknown["status"] == "unknown"
        bal = _structured(await client.call_tool("balances", {}))
        invoice = _structured(await client.call_tool("pay_invoice", {"invoice": "<nope@partner.test>"}))
        assert (invoice["status"], invoice["code"]) == ("blocked", "invoice_not_found")
        outputs += [json.dumps(x) for x in (mcp_paid, stranger, offer, accept, status, unknown, bal, invoice)]
    assert kit.usdc_of(to) == 10 * USDC
    assert len(sink.messages) == 5  # two PAYs, the approved PAY, the OFFER, the ACCEPT
    outputs += [raw.decode("utf-8", "replace") for _f, _t, raw in sink.messages]

    # A vault with another key cannot open the sealed key, and says so without echoing it.
    sealed = await kit.payments.store.sealed(wallet["id"], agent["id"])
    assert sealed is not None and secret not in sealed
    with pytest.raises(VaultError) as verr:
        Vault(b"another-vault-secret-0123456789").open_secret(
            sealed, agent_id=agent["id"], wallet_id=wallet["id"]
        )
    outputs.append(str(verr.value))
    with pytest.raises(VaultError):  # a blob moved onto another wallet's row does not open
        Vault(b"test-vault-secret-0123456789abcdef").open_secret(
            sealed, agent_id=agent["id"], wallet_id=fresh["id"]
        )
    assert "sealed" in repr(kit.payments.vault)

    captured = capfd.readouterr()
    outputs += [captured.out, captured.err, caplog.text]
    if isinstance(store, SqliteStore):  # at rest: the database file holds no key
        for suffix in ("", "-wal"):
            db = Path(store.path + suffix)
            if db.exists():
                outputs.append(db.read_bytes().decode("latin-1"))
                assert secret not in db.read_bytes() and secret[:32] not in db.read_bytes()
    else:
        dump = await store.execute_sql("SELECT sealed FROM enf_wallets", ())
        outputs.append(json.dumps([r[0] for r in dump]))
    everything = "\n".join(outputs)
    assert len(everything) > 10_000  # the run produced real output to search
    for spelling in _encodings(secret):
        assert spelling not in everything
    assert str(key.pubkey()) in everything  # the search does see what the outputs do carry


async def test_payment_bodies_are_read_under_the_send_paths_limits(paid_service: tuple[str, Kit]) -> None:
    url, kit = paid_service
    token, address = await kit.agent("limits")
    headers = {"Authorization": f"Bearer {token}"}
    deep = "[" * 200 + "]" * 200
    huge = '{"amount": ' + "9" * 5000 + "}"
    async with httpx.AsyncClient(base_url=url) as http:
        for body in (deep, huge, '{"to": "\\ud800"}', "not json", '["a list"]'):
            r = await http.post("/v1/pay", content=body, headers=headers)
            assert r.status_code == 200
            d = r.json()
            assert (d["status"], d["code"]) == ("blocked", "invalid_request"), body[:20]
        policy = await http.put("/v1/agents/limits/policy", content=deep,
                                headers={"Authorization": f"Bearer {OPERATOR}"})
        assert policy.status_code == 400
    assert kit.payment_txs(address) == []  # nothing moved
