"""The evidence folder of a real paid flow (issue 31 item 5): the demo world — the garden,
DKIM on both sides, SQLite ledgers, the local Solana and Base chains — runs WHICH, ORDER,
INVOICE, PAY, FULFILL; the worker's ledger and the buyer's each write the flow's folder,
and `envelopay evidence verify` (no config, no ledger) proves each: who asked, who paid
how much and when, what was delivered down to the result's hash. One byte changed
anywhere, in any file or in the manifest, and the folder no longer verifies."""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.demo import PRICE, DemoWorld
from envelopay.client.evidence import read_folder, write_evidence
from envelopay.client.evidence_check import check_evidence
from envelopay.config import WorkerConfig
from envelopay.node.agent_node import AgentNode
from envelopay.node.jobs import job_runner
from envelopay.protocol.messages import Invoice, Order, Pay

runner = CliRunner()
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cli-output.schema.json").read_text())
CHAINS = pytest.mark.parametrize("chain", ["solana-local", "base-local"])
TEXT = "pay me on {chain} please"  # the demo's first_contact task text


async def _paid_flow(w: DemoWorld, chain: str) -> tuple[str, str]:
    """(the worker's flow id, the buyer's) of one paid first contact."""
    worker_flow, inv, _ = await w.first_contact(chain, "evidence", 1)
    assert inv is not None and w.flow_state(worker_flow) == "fulfilled"
    for node in (w.worker, w.buyer):  # a mail is kept once its delivery returned: the drains end
        await node.settle()
    [buyer_flow] = w.buyer.store.list_flows()
    return worker_flow, buyer_flow.flow_id


async def _write(node: AgentNode, flow: str, out: Path, rails: Any = None) -> None:
    assert node.evidence is not None
    done = await write_evidence(node.store, node.evidence, flow, out, now=datetime.now(UTC), rails=rails)
    assert done.missing == [] and done.mails == 6 and done.proofs == 1 and done.result


def _verify(folder: Path) -> dict[str, Any]:
    res = runner.invoke(app, ["evidence", "verify", str(folder), "--json"])
    doc: dict[str, Any] = json.loads(res.stdout)
    assert res.exit_code == doc["exit"]
    jsonschema.validate(doc, {**SCHEMA, "$ref": "#/$defs/evidence_verify"} | {"anyOf": [True]})
    return doc


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@CHAINS
async def test_each_side_writes_a_folder_the_other_side_proves(
    demo_world: DemoWorld, tmp_path: Path, chain: str
) -> None:
    w = demo_world
    worker_flow, buyer_flow = await _paid_flow(w, chain)
    await _write(w.worker, worker_flow, tmp_path / "from-worker")
    await _write(w.buyer, buyer_flow, tmp_path / "from-buyer", rails=w.buyer_rails)  # verifies on the chain
    side = "sol" if chain == "solana-local" else "base"
    text = TEXT.format(chain=chain)
    claims = []
    for folder in ("from-worker", "from-buyer"):
        doc = _verify(tmp_path / folder)
        assert (doc["exit"], doc["proven"], doc["reason"]) == (0, True, None), doc
        c = doc["claims"]
        assert (c["asked"]["by"], c["asked"]["order"], c["asked"]["task"]) == (
            "buyer@garden.local", "ord_1", "word_count")
        [paid] = c["paid"]
        assert (paid["by"], paid["amount"], paid["token"], paid["chain"]) == (
            "buyer@garden.local", str(PRICE), "USDC", chain)
        assert paid["payee"].lower() == w.wallets[f"worker_{side}"].lower()
        assert paid["payer"].lower() == w.wallets[f"buyer_{side}"].lower()
        assert paid["tx_time"] and paid["payee_from_invoice"]
        landed = paid["slot"] if chain == "solana-local" else paid["block"]
        assert isinstance(landed, int) and landed > 0  # where the transaction landed, as the rail said
        assert c["delivered"]["by"] == "worker@garden.local"
        assert c["delivered"]["result_sha256"] == _digest({"words": 5, "characters": len(text)})
        claims.append((paid["tx"], c["delivered"]["result_sha256"], c["asked"]["task_sha256"]))
        # In a thread, as from a shell: the command runs its own event loop.
        shown = await asyncio.to_thread(runner.invoke, app, ["evidence", "verify", str(tmp_path / folder)])
        said = shown.stdout
        # A person reads the asset's units, from the installed rails' registries (offline).
        assert f"buyer@garden.local paid 0.25 USDC ({PRICE} units) on {chain}," in said, said
    assert claims[0] == claims[1]  # both ledgers tell the same story
    worker_doc, buyer_doc = (json.loads((tmp_path / f / "manifest.json").read_text())
                             for f in ("from-worker", "from-buyer"))
    assert worker_doc["produced"]["by"] == "worker@garden.local"
    assert buyer_doc["produced"]["by"] == "buyer@garden.local"
    proof = json.loads((tmp_path / "from-buyer" / buyer_doc["proofs"][0]).read_text())
    assert proof["verified_by"] == "buyer@garden.local" and "on the chain" in proof["how"]


def _flip(files: dict[str, bytes], path: str, at: int) -> dict[str, bytes]:
    data = bytearray(files[path])
    data[at] ^= 0x01
    return {**files, path: bytes(data)}


def _reseal(files: dict[str, bytes], path: str, data: bytes) -> dict[str, bytes]:
    """`path` changed to `data`, with the manifest's hash and its seal made to agree."""
    out = {**files, path: data}
    manifest = json.loads(files["manifest.json"])
    manifest["files"][path] = hashlib.sha256(data).hexdigest()
    body = json.dumps(manifest).encode()
    return {**out, "manifest.json": body, "manifest.sha256": hashlib.sha256(body).hexdigest().encode()}


async def test_one_byte_changed_anywhere_fails(demo_world: DemoWorld, tmp_path: Path) -> None:
    worker_flow, _ = await _paid_flow(demo_world, "solana-local")
    await _write(demo_world.worker, worker_flow, tmp_path / "ev")
    files = read_folder(tmp_path / "ev")
    assert check_evidence(files).ok
    kinds = {p.split("/")[0] for p in files}
    assert kinds == {"mails", "keys", "proofs", "result.json", "manifest.json", "manifest.sha256"}
    flips = 0
    for path, data in files.items():
        for at in range(len(data)):  # every byte of every file
            report = check_evidence(_flip(files, path, at))
            assert not report.ok and report.reason == "tampered", (path, at, report)
            flips += 1
    assert flips == sum(len(d) for d in files.values()) > 10_000
    gone = check_evidence({p: d for p, d in files.items() if not p.startswith("proofs/")})
    assert (gone.ok, gone.reason) == (False, "tampered")
    extra = check_evidence({**files, "mails/99-extra.eml": b"x"})
    assert (extra.ok, extra.reason) == (False, "tampered")


async def test_a_change_with_its_hashes_redone_fails_on_what_it_changed(
    demo_world: DemoWorld, tmp_path: Path
) -> None:
    worker_flow, _ = await _paid_flow(demo_world, "solana-local")
    await _write(demo_world.worker, worker_flow, tmp_path / "ev")
    files = read_folder(tmp_path / "ev")
    manifest = json.loads(files["manifest.json"])
    by_type = {m["type"]: m["file"] for m in manifest["mails"]}
    fulfill = files[by_type["fulfill"]]
    assert b'"words": 5' in fulfill or b'"words":5' in fulfill
    forged = fulfill.replace(b'"words": 5', b'"words": 6').replace(b'"words":5', b'"words":6')
    cases = {
        "signature": _reseal(files, by_type["fulfill"], forged),
        "proof": _reseal(files, manifest["proofs"][0],
                         files[manifest["proofs"][0]].replace(b'"amount": "250000"', b'"amount": "1"')),
        "result": _reseal(files, "result.json",
                          files["result.json"].replace(b'"sha256": "', b'"sha256": "0')),
    }
    result = json.loads(files["result.json"])
    result["job"] = {"job_id": "job_x", "result_hash": "0" * 64}
    cases["result  "] = _reseal(files, "result.json", json.dumps(result).encode())
    key = next(p for p in files if p.startswith("keys/"))
    other = json.loads(files[key])
    other["record"] = other["record"][:-6] + "AAAAA="
    cases["signature "] = _reseal(files, key, json.dumps(other).encode())
    for reason, forged_files in cases.items():
        report = check_evidence(forged_files)
        assert (report.ok, report.reason) == (False, reason.strip()), (reason, report.detail)


def _worker_config(w: DemoWorld) -> Path:
    path = w.workdir / "worker-evidence.toml"
    path.write_text(
        '[agent]\naddress = "worker@garden.local"\ndomain = "garden.local"\nledger = "worker.db"\n'
        'dkim_policy = "off"\n[transport]\nkind = "garden"\ngarden_root = "garden"\n'
    )
    return path


async def test_the_cli_writes_the_folder_and_refuses_bad_input(demo_world: DemoWorld, tmp_path: Path) -> None:
    worker_flow, _ = await _paid_flow(demo_world, "solana-local")
    await asyncio.to_thread(_cli_writes, worker_flow, str(_worker_config(demo_world)), tmp_path)


def _cli_writes(worker_flow: str, config: str, tmp_path: Path) -> None:
    """The commands as a person runs them: their own event loop, beside the world's."""
    out = tmp_path / "ev"
    res = runner.invoke(app, ["evidence", worker_flow, "--out", str(out), "-c", config, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert (doc["command"], doc["mails"], doc["proofs"], doc["result"], doc["missing"]) == (
        "evidence", 6, 1, True, [])
    plain = runner.invoke(app, ["evidence", "verify", str(out)])
    assert plain.exit_code == 0
    assert "paid:      buyer@garden.local paid 0.25 USDC (250000 units)" in plain.stdout
    again = runner.invoke(app, ["evidence", worker_flow, "--out", str(out), "-c", config, "--json"])
    assert (again.exit_code, json.loads(again.stdout)["field"]) == (2, "--out")  # not an empty folder
    unknown = runner.invoke(app, ["evidence", "flow_nope", "--out", str(tmp_path / "x"), "-c", config,
                                  "--json"])
    assert (unknown.exit_code, json.loads(unknown.stdout)["field"]) == (2, "FLOW")
    (out / "result.json").write_bytes((out / "result.json").read_bytes() + b" ")
    broken = _verify(out)
    assert (broken["exit"], broken["proven"], broken["reason"]) == (1, False, "tampered")


class _JobsWorld(DemoWorld):
    """The demo world whose worker keeps its config, to run its ORDERs as jobs."""

    def _configs(self, records: dict[str, str], port: int | None) -> tuple[WorkerConfig, WorkerConfig]:
        worker, buyer = super()._configs(records, port)
        self.worker_cfg = worker
        return worker, buyer


async def test_a_paid_job_s_folder_carries_the_job_and_its_result_hash(tmp_path: Path) -> None:
    """A served worker takes a paid ORDER on as a job (node/jobs.py): its folder names the
    job, and the job's result hash is the FULFILL's, checked offline."""
    world = _JobsWorld(tmp_path / "world", None)
    await world.setup()
    stop = asyncio.Event()
    try:
        runner = job_runner(world.worker, world.worker_cfg, poll=0.2)
        assert runner is not None
        loop = asyncio.create_task(runner.run(stop))
        task = {"name": "word_count", "text": "evidence of a job"}
        _, inv, bflow = await world.exchange(Order(id="job1", task=task))
        assert isinstance(inv, Invoice)
        proof = await world.pay(world.buyer_rails, inv.chain, "USDC", inv.amount, inv.wallet)
        paid, _, _ = await world.exchange(Pay(id="pay-job1", amount=inv.amount, token="USDC", chain=inv.chain,
                                              proof=proof, invoice_ref=inv.id), flow_id=bflow)
        async with asyncio.timeout(60):
            while (world.buyer.store.get_flow(bflow) or paid).state != "fulfilled":
                await asyncio.sleep(0.05)
        for node in (world.worker, world.buyer):
            await node.settle()
        out = tmp_path / "ev"
        assert world.worker.evidence is not None
        done = await write_evidence(world.worker.store, world.worker.evidence, paid.flow_id or "", out,
                                    now=datetime.now(UTC))
        assert done.missing == [] and done.result
        job = json.loads((out / "result.json").read_text())["job"]
        assert job["state"] == "done" and set(job["at"]) >= {"queued", "running", "done"}
        assert job["result_hash"] == _digest({"words": 4, "characters": len(task["text"])})
        doc = _verify(out)
        assert doc["proven"], (doc["reason"], doc["detail"])
        assert doc["claims"]["delivered"]["result_sha256"] == job["result_hash"]
        stop.set()
        await loop
    finally:
        stop.set()
        await world.teardown()
