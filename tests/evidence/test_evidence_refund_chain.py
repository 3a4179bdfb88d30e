"""An evidence folder holds the refund an OOPS carries with its on-chain verification
(walk 11: `evidence verify` said nothing of it, though in a dispute the money sent back is
what matters). The demo world's worker refunds an underpaid PAY; its folder holds the
refund's transaction checked on the local chain — amount, payer the worker, payee the
buyer — and `evidence verify` says `refunded X to Y in tx Z` after checking it against the
signed OOPS. A byte changed in the refund's record, hashes redone, fails it."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.demo import DemoWorld
from envelopay.client.evidence import read_folder, write_evidence
from envelopay.client.evidence_check import check_evidence
from envelopay.protocol.messages import Invoice, Order, Pay

runner = CliRunner()
CHAIN = "solana-local"


async def _refunded_flow(w: DemoWorld) -> tuple[str, int]:
    """The worker's flow id of an INVOICE paid short (refunded in full), and the amount."""
    task = {"name": "word_count", "text": "short pay", "rail": f"{CHAIN}/USDC"}
    out, inv, bflow = await w.exchange(Order(id="ord_r", task=task))
    assert isinstance(inv, Invoice) and out.flow_id
    under = inv.amount - 1
    proof = await w.pay(w.buyer_rails, CHAIN, "USDC", under, inv.wallet)
    pay = Pay(id="pay_r", amount=inv.amount, token="USDC", chain=CHAIN, proof=proof, invoice_ref=inv.id)
    answer, _, _ = await w.exchange(pay, flow_id=bflow)
    assert answer.oops is not None and answer.oops.value == "amount_mismatch"
    for node in (w.worker, w.buyer):  # a mail is kept once its delivery returned: the drains end
        await node.settle()
    return out.flow_id, under


def _reseal(files: dict[str, bytes], path: str, data: bytes) -> dict[str, bytes]:
    manifest = json.loads(files["manifest.json"])
    manifest["files"][path] = hashlib.sha256(data).hexdigest()
    body = json.dumps(manifest).encode()
    return {**files, path: data, "manifest.json": body,
            "manifest.sha256": hashlib.sha256(body).hexdigest().encode()}


async def test_the_refund_is_in_the_folder_checked_on_the_chain(
    demo_world: DemoWorld, tmp_path: Path
) -> None:
    w = demo_world
    flow, under = await _refunded_flow(w)
    assert w.worker.evidence is not None
    out = tmp_path / "ev"
    await write_evidence(w.worker.store, w.worker.evidence, flow, out, now=datetime.now(UTC),
                         rails=w.worker.rails)
    manifest = json.loads((out / "manifest.json").read_text())
    [path] = manifest["refunds"]
    record = json.loads((out / path).read_text())
    assert (record["amount"], record["status"]) == (str(under), "ok")
    assert record["payer"] == w.wallets["worker_sol"] and record["payee"] == w.wallets["buyer_sol"]
    assert isinstance(record["slot"], int) and record["slot"] > 0

    report = check_evidence(read_folder(out))
    assert report.ok, report.detail
    [back] = report.proven["refunded"]
    assert (back["amount"], back["payee"], back["tx"]) == (str(under), w.wallets["buyer_sol"], record["tx"])
    said = (await asyncio.to_thread(runner.invoke, app, ["evidence", "verify", str(out)])).stdout
    buyer = w.wallets["buyer_sol"]
    assert f"refunded:  0.249999 USDC ({under} units) to {buyer} in tx {record['tx']}" in said, said
    assert "checked on the chain: see refunded" in said

    # The buyer's folder (the walk's side) holds the same refund, verified on the chain too.
    [bflow] = [f.flow_id for f in w.buyer.store.list_flows()]
    assert w.buyer.evidence is not None
    await write_evidence(w.buyer.store, w.buyer.evidence, bflow, tmp_path / "buyer", now=datetime.now(UTC),
                         rails=w.buyer_rails)
    theirs = check_evidence(read_folder(tmp_path / "buyer"))
    assert theirs.ok and [r["tx"] for r in theirs.proven["refunded"]] == [record["tx"]], theirs.detail

    files = read_folder(out)
    for field, value in (("amount", "249998"), ("payee", w.wallets["worker_sol"]), ("tx", "1" * 88)):
        forged = json.loads(files[path])
        forged[field] = value
        bad = check_evidence(_reseal(files, path, json.dumps(forged).encode()))
        assert (bad.ok, bad.reason) == (False, "proof"), (field, bad.detail)
    flipped = bytearray(files[path])
    flipped[len(flipped) // 2] ^= 0x01
    assert check_evidence({**files, path: bytes(flipped)}).reason == "tampered"
