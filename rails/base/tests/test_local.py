"""The eth-tester local chain: real signed transactions, the real Vyper ERC-20, pay and verify."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account

from envelopay.errors import ConfigError, RailError, UsageError
from envelopay.rails.interface import Expectation, Reason
from envelopay.rails.registry import make
from envelopay_base.assets import USDC_LOCAL
from envelopay_base.local import LocalChain
from envelopay_base.rail import BaseRail, erc20_transfer_data, make_rail


def seeded_rng(label: str) -> Any:
    counter = iter(range(10**6))
    return lambda n: hashlib.sha256(f"{label}-{next(counter)}".encode()).digest()[:n]


@pytest.fixture
def chain() -> LocalChain:
    # One block per transaction: the tests mine confirmations themselves.
    return LocalChain(rng=seeded_rng("base-tests"), blocks_per_tx=1)


@pytest.fixture
def buyer(chain: LocalChain, tmp_path: Path) -> tuple[str, BaseRail]:
    address, key = chain.new_wallet()
    chain.fund(address, eth=10**18, usdc=100_000_000)
    key_file = tmp_path / "buyer.key"
    key_file.write_text(key + "\n")
    return address, make_rail({"backend": "local", "local_chain": chain, "keypair": str(key_file)})


@pytest.fixture
def seller(chain: LocalChain) -> tuple[str, BaseRail]:
    address, _ = chain.new_wallet()
    return address, make_rail({"local_chain": chain})


def want(recipient: str, amount: int, token: str = "USDC", **kw: Any) -> Expectation:
    return Expectation(chain="base-local", token=token, amount=amount, recipient=recipient, **kw)


def test_local_token_is_the_registered_one(chain: LocalChain) -> None:
    assert chain.token_address == USDC_LOCAL
    rail = make_rail({"local_chain": chain})
    usdc = rail.resolve("usdc")
    assert usdc is not None and usdc.address == chain.token_address and usdc.decimals == 6
    assert chain.token.functions.decimals().call() == 6
    assert chain.token.functions.symbol().call() == "USDC"
    assert {a.symbol for a in rail.assets()} == {"ETH", "USDC"}
    assert rail.chains == ("base-local",)


async def test_usdc_pay_pending_then_ok(chain: LocalChain, buyer: Any, seller: Any) -> None:
    buyer_address, buyer_rail = buyer
    seller_address, seller_rail = seller
    proof = await buyer_rail.pay(
        chain="base-local", token="USDC", amount=25_000_000, recipient=seller_address
    )
    assert chain.token_balance(seller_address) == 25_000_000
    assert chain.token_balance(buyer_address) == 75_000_000
    first = await seller_rail.verify(proof, want(seller_address, 25_000_000))
    assert first.status == "pending" and first.reason is Reason.NOT_FINAL
    chain.mine(1)
    verdict = await seller_rail.verify(proof, want(seller_address, 25_000_000, payer=buyer_address))
    assert verdict.ok, verdict
    assert verdict.observed_amount == 25_000_000
    assert verdict.payer == buyer_address.lower()
    assert verdict.proof_key == seller_rail.proof_key(proof)
    deeper = await seller_rail.verify(proof, want(seller_address, 25_000_000, confirmations=5))
    assert deeper.status == "pending"
    chain.mine(3)
    assert (await seller_rail.verify(proof, want(seller_address, 25_000_000, confirmations=5))).ok


async def test_eth_pay_and_content_rejections(chain: LocalChain, buyer: Any, seller: Any) -> None:
    buyer_address, buyer_rail = buyer
    seller_address, seller_rail = seller
    before = chain.eth_balance(seller_address)
    proof = await buyer_rail.pay(chain="base-local", token="ETH", amount=10**15, recipient=seller_address)
    chain.mine(2)
    assert chain.eth_balance(seller_address) - before == 10**15
    assert (await seller_rail.verify(proof, want(seller_address, 10**15, token="ETH"))).ok
    cases = {
        Reason.AMOUNT_MISMATCH: want(seller_address, 10**15 + 1, token="ETH"),
        Reason.RECIPIENT_MISMATCH: want(buyer_address, 10**15, token="ETH"),
        Reason.TOKEN_MISMATCH: want(seller_address, 10**15),
        Reason.PAYER_MISMATCH: want(seller_address, 10**15, token="ETH", payer=chain.faucet),
        Reason.CHAIN_MISMATCH: Expectation("base", "ETH", 10**15, seller_address),
        Reason.UNSUPPORTED_ASSET: want(seller_address, 10**15, token="DAI"),
    }
    for reason, expectation in cases.items():
        verdict = await seller_rail.verify(proof, expectation)
        assert (verdict.status, verdict.reason) == ("rejected", reason), (reason, verdict)
    lenient = want(seller_address, 10**14, token="ETH", amount_policy="at_least")
    at_least = await seller_rail.verify(proof, lenient)
    assert at_least.ok and at_least.observed_amount == 10**15


async def test_usdc_rejections_recipient_amount_and_address_token(
    chain: LocalChain, buyer: Any, seller: Any
) -> None:
    _, buyer_rail = buyer
    seller_address, seller_rail = seller
    proof = await buyer_rail.pay(chain="base-local", token="USDC", amount=5_000_000, recipient=seller_address)
    chain.mine(1)
    token = "0x" + chain.token_address[2:].upper()
    by_address = await seller_rail.verify(proof, want(seller_address, 5_000_000, token=token))
    assert by_address.ok
    other, _ = chain.new_wallet()
    assert (await seller_rail.verify(proof, want(other, 5_000_000))).reason is Reason.RECIPIENT_MISMATCH
    assert (await seller_rail.verify(proof, want(seller_address, 6_000_000))).reason is Reason.AMOUNT_MISMATCH
    eth_wanted = await seller_rail.verify(proof, want(seller_address, 0, token="ETH"))
    assert eth_wanted.reason is Reason.TOKEN_MISMATCH  # calldata: not a plain ETH transfer


async def test_reverted_transaction_is_tx_failed(chain: LocalChain, seller: Any) -> None:
    seller_address, seller_rail = seller
    poor, key = chain.new_wallet()
    chain.fund(poor, eth=10**17)  # gas money, no USDC: the transfer reverts on-chain
    tx = {"type": 2, "chainId": chain.chain_id, "nonce": 0, "maxFeePerGas": 10**10,
          "maxPriorityFeePerGas": 10**9, "to": chain.token_address, "value": 0,
          "data": erc20_transfer_data(seller_address, 5), "gas": 100_000}
    raw = Account.sign_transaction(tx, key).raw_transaction
    tx_hash = chain.tester.send_raw_transaction("0x" + bytes(raw).hex())
    chain.mine(2)
    verdict = await seller_rail.verify({"tx": tx_hash}, want(seller_address, 5))
    assert (verdict.status, verdict.reason) == ("rejected", Reason.TX_FAILED)


async def test_not_found_and_malformed_proofs(seller: Any) -> None:
    seller_address, seller_rail = seller
    missing = await seller_rail.verify({"tx": "0x" + "ab" * 32}, want(seller_address, 1))
    assert (missing.status, missing.reason) == ("rejected", Reason.TX_NOT_FOUND)
    for bad in ({}, {"tx": 12}, {"tx": "0x1234"}, {"tx": "0x" + "zz" * 32}, {"signature": "abc"}):
        verdict = await seller_rail.verify(bad, want(seller_address, 1))
        assert (verdict.status, verdict.reason) == ("rejected", Reason.MALFORMED_PROOF), bad
    assert (await seller_rail.verify({"tx": "0x" + "ab" * 32}, want("not-an-address", 1))).reason is (
        Reason.RECIPIENT_MISMATCH)


async def test_freshness_window(chain: LocalChain, buyer: Any, seller: Any) -> None:
    _, buyer_rail = buyer
    seller_address, seller_rail = seller
    proof = await buyer_rail.pay(chain="base-local", token="USDC", amount=1, recipient=seller_address)
    chain.mine(1)
    mined = (await seller_rail.verify(proof, want(seller_address, 1))).tx_time
    assert mined is not None
    five = timedelta(minutes=5)
    inside = want(seller_address, 1, not_before=mined - five, not_after=mined + five)
    assert (await seller_rail.verify(proof, inside)).ok
    later = want(seller_address, 1, not_before=mined + timedelta(seconds=1))
    assert (await seller_rail.verify(proof, later)).reason is Reason.STALE
    earlier = want(seller_address, 1, not_after=mined - timedelta(seconds=1))
    assert (await seller_rail.verify(proof, earlier)).reason is Reason.STALE
    naive_utc = want(seller_address, 1, not_after=(mined + timedelta(seconds=1)).replace(tzinfo=None))
    assert (await seller_rail.verify(proof, naive_utc)).ok


async def test_time_travel_moves_block_time(chain: LocalChain, buyer: Any, seller: Any) -> None:
    _, buyer_rail = buyer
    seller_address, seller_rail = seller
    target = datetime(2030, 1, 1, tzinfo=UTC)
    chain.time_travel(int(target.timestamp()))
    proof = await buyer_rail.pay(chain="base-local", token="USDC", amount=7, recipient=seller_address)
    chain.mine(1)
    verdict = await seller_rail.verify(proof, want(seller_address, 7, not_before=target))
    assert verdict.ok and verdict.tx_time is not None and verdict.tx_time >= target


async def test_insufficient_funds(chain: LocalChain, seller: Any, tmp_path: Path) -> None:
    seller_address, _ = seller
    address, key = chain.new_wallet()
    chain.fund(address, eth=10**15, usdc=10)
    rail = make_rail({"local_chain": chain, "keypair": key.encode()})
    for token, amount in (("USDC", 11), ("ETH", 10**15)):
        with pytest.raises(RailError) as info:
            await rail.pay(chain="base-local", token=token, amount=amount, recipient=seller_address)
        assert info.value.reason == "insufficient_funds"
    broke, broke_key = chain.new_wallet()
    chain.fund(broke, usdc=1_000)  # tokens but no ETH for gas
    rail = make_rail({"local_chain": chain, "keypair": bytes.fromhex(broke_key[2:])})
    with pytest.raises(RailError) as info:
        await rail.pay(chain="base-local", token="USDC", amount=5, recipient=seller_address)
    assert info.value.reason == "insufficient_funds"
    assert chain.token_balance(seller_address) == 0  # nothing moved


async def test_pay_usage_and_config_errors(chain: LocalChain, buyer: Any, tmp_path: Path) -> None:
    _, buyer_rail = buyer
    recipient = "0x" + "44" * 20
    for kwargs in (
        {"chain": "base", "token": "USDC", "amount": 1, "recipient": recipient},
        {"chain": "base-local", "token": "DAI", "amount": 1, "recipient": recipient},
        {"chain": "base-local", "token": "USDC", "amount": 0, "recipient": recipient},
        {"chain": "base-local", "token": "USDC", "amount": 1, "recipient": "0x1234"},
    ):
        with pytest.raises(UsageError):
            await buyer_rail.pay(**kwargs)
    with pytest.raises(ConfigError):
        no_key = make_rail({"local_chain": chain})
        await no_key.pay(chain="base-local", token="ETH", amount=1, recipient=recipient)
    bad = tmp_path / "bad.key"
    bad.write_text("not a key")
    for options in ({"keypair": str(bad)}, {"keypair": str(tmp_path / "missing")},
                    {"backend": "carrier-pigeon"}, {"network": "moon"},
                    {"backend": "local", "network": "mainnet"}, {"backend": "rpc"},
                    {"local_chain": object()}):
        with pytest.raises(ConfigError):
            make_rail({"local_chain": chain, **options} if "local_chain" not in options else options)


async def test_default_chain_makes_payments_final_at_once(tmp_path: Path) -> None:
    chain = LocalChain()
    payer, key = chain.new_wallet()
    chain.fund(payer, eth=10**18, usdc=10)
    rail = make_rail({"local_chain": chain, "keypair": key.encode()})
    to, _ = chain.new_wallet()
    head = chain.head()
    proof = await rail.pay(chain="base-local", token="USDC", amount=10, recipient=to)
    assert chain.head() == head + 2  # the transaction's block and one more
    verdict = await rail.verify(proof, want(to, 10))
    assert verdict.ok and verdict.extra["confirmations"] == 2
    with pytest.raises(ValueError):
        LocalChain(blocks_per_tx=0)


async def test_injected_clock_sets_block_times() -> None:
    now = [datetime(2031, 5, 1, 12, 0, tzinfo=UTC)]
    rail = make_rail({"clock": lambda: now[0]})
    chain = rail.local_chain
    assert isinstance(chain, LocalChain)
    payer, key = chain.new_wallet()
    chain.fund(payer, eth=10**18)
    rail = make_rail({"local_chain": chain, "keypair": key.encode()})
    to, _ = chain.new_wallet()
    proof = await rail.pay(chain="base-local", token="ETH", amount=1, recipient=to)
    window = want(to, 1, token="ETH", not_before=now[0], not_after=now[0] + timedelta(minutes=1))
    verdict = await rail.verify(proof, window)
    assert verdict.ok, verdict
    now[0] += timedelta(hours=1)
    later = await rail.pay(chain="base-local", token="ETH", amount=1, recipient=to)
    assert (await rail.verify(later, window)).reason is Reason.STALE


def test_proof_key_is_canonical(chain: LocalChain) -> None:
    rail = make_rail({"local_chain": chain})
    h = "ab" * 32
    keys = {rail.proof_key({"tx": v}) for v in ("0x" + h, "0x" + h.upper(), h, h.upper(), "0X" + h)}
    assert keys == {"0x" + h}
    for bad in ({"tx": "0x" + h + "00"}, {"tx": " 0x" + h}, {"tx": None}, {}):
        with pytest.raises(ValueError):
            rail.proof_key(bad)


def test_entry_point_and_asset_overrides(chain: LocalChain) -> None:
    rail = make("base", {"local_chain": chain})
    assert isinstance(rail, BaseRail) and rail.name == "base" and rail.local_chain is chain
    custom = "0x" + "55" * 20
    rail = make_rail({"backend": "rpc", "rpc_url": "http://127.0.0.1:9/", "network": "sepolia",
                      "assets": {"base-sepolia": {"EURC": {"address": custom, "decimals": 6}}}})
    eurc = rail.resolve("eurc")
    assert eurc is not None and eurc.address == custom
    assert rail.resolve(custom.upper().replace("0X", "0x")) == eurc
    assert rail.chains == ("base-sepolia",) and rail.chain_id == 84532
