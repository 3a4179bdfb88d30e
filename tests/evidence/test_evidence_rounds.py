"""The evidence folder of a job that was held and retried (`jobs retry`, jobs schema v2)
lists both rounds of its attempts: the worker's job record in result.json carries the
earlier round (its attempts, times, error) beside this round's times, and `evidence verify`
reads it; a folder without rounds (written before they were recorded) still verifies, one
byte changed still fails, and rounds that are not rounds are unreadable."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.worker._jobs_kit import job_in

from envelopay.client.demo import PRICE, DemoWorld
from envelopay.client.evidence import read_folder, write_evidence
from envelopay.client.evidence_check import check_evidence
from envelopay.client.evidence_manifest import MANIFEST, SEAL, sha256_hex
from envelopay.config import config_from_dict
from envelopay.node.job_admin import retry_held
from envelopay.protocol.messages import Invoice, Order, Pay
from envelopay.worker.app import WorkerApp, WorkerApplication
from envelopay.worker.runner import JobRunner

CHAIN = "solana-local"


async def _retried_and_fulfilled(w: DemoWorld, gate: Path) -> str:
    """A paid ORDER of the gated task: held in round 1, retried with the gate open,
    fulfilled in round 2. The worker's flow id."""
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    doc = app.app.config.model_dump()
    doc["tasks"] = [{"name": "gated", "handler": "tests.evidence._rounds_tasks:gated", "on_failure": "hold",
                     "schema": "tests.evidence._rounds_tasks:Gated", "price": str(PRICE)}]
    base = doc.pop("base_dir")
    app.app = WorkerApp(config_from_dict(doc, base_dir=base), rails=w.worker.engine.rails)
    runner = JobRunner(w.worker.engine, app.app.tasks, poll=0.05, after_answer=w.worker.drain)
    app.jobs, app.on_job = True, (lambda _job: runner.wake())
    stop = asyncio.Event()
    loop = asyncio.create_task(runner.run(stop))
    try:
        task = {"name": "gated", "text": "two rounds", "gate": str(gate), "rail": f"{CHAIN}/USDC"}
        _, inv, bflow = await w.exchange(Order(id="o-gated", task=task))
        assert isinstance(inv, Invoice)
        proof = await w.pay(w.buyer_rails, CHAIN, "USDC", inv.amount, inv.wallet)
        paid, _, _ = await w.exchange(Pay(id="p-gated", amount=inv.amount, token="USDC", chain=CHAIN,
                                          proof=proof, invoice_ref=inv.id), flow_id=bflow)
        flow = paid.flow_id or ""
        held = await job_in(w, flow, "held")
        gate.touch()
        assert retry_held(w.worker.store, held.job_id, datetime.now(UTC)).done
        runner.wake()
        await job_in(w, flow, "done")
        async with asyncio.timeout(60):
            while (w.worker.store.get_flow(flow) or paid).state != "fulfilled":
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 30)
    for node in (w.worker, w.buyer):
        await node.settle()
    return flow


def _reseal(files: dict[str, bytes], path: str, data: bytes) -> dict[str, bytes]:
    """`path` replaced by `data`, with its hash in the manifest and the seal redone: what a
    producer writing without rounds, or a forger, would hand over."""
    out = dict(files)
    out[path] = data
    manifest = json.loads(files[MANIFEST])
    manifest["files"][path] = sha256_hex(data)
    body = json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
    out[MANIFEST], out[SEAL] = body, sha256_hex(body).encode() + b"\n"
    return out


def _with_job(files: dict[str, bytes], **job: Any) -> dict[str, bytes]:
    result = json.loads(files["result.json"])
    result["job"] = {k: v for k, v in {**result["job"], **job}.items() if v is not None}
    return _reseal(files, "result.json", json.dumps(result, indent=2, sort_keys=True).encode() + b"\n")


async def test_a_retried_job_s_folder_lists_both_rounds(demo_world: DemoWorld, tmp_path: Path) -> None:
    w = demo_world
    flow = await _retried_and_fulfilled(w, tmp_path / "gate")
    out = tmp_path / "ev"
    assert w.worker.evidence is not None
    done = await write_evidence(w.worker.store, w.worker.evidence, flow, out, now=datetime.now(UTC))
    assert done.missing == [] and done.result
    job = json.loads((out / "result.json").read_text())["job"]
    [first] = job["rounds"]
    assert first["attempts"] >= 1 and "task gated failed" in first["error"]  # how round 1 ended
    assert {"queued", "running", "held"} <= set(first["at"])
    assert job["state"] == "done" and "held" not in job["at"]  # this round's times are its own
    assert first["at"]["held"] <= job["at"]["queued"] <= job["at"]["done"]  # the retry came after round 1

    files = read_folder(out)
    report = check_evidence(files)
    assert report.ok, (report.reason, report.detail)
    assert report.proven["delivered"]["job_rounds"] == [
        {"attempts": first["attempts"], "at": first["at"], "error": first["error"]}]
    assert any("1 earlier round(s)" in c for c in report.checked)

    # A folder written before rounds were recorded (no `rounds`) verifies as it did.
    old = check_evidence(_with_job(files, rounds=None))
    assert old.ok and "job_rounds" not in old.proven["delivered"], old.detail
    # One byte changed in the job's record, hashes not redone: tampered.
    at = files["result.json"].index(b"task gated failed")
    flipped = {**files, "result.json": files["result.json"][:at] + b"T" + files["result.json"][at + 1:]}
    assert (check_evidence(flipped).ok, check_evidence(flipped).reason) == (False, "tampered")
    # Resealed, rounds that are not rounds are refused, never raised.
    for bad in ({"x": 1}, [{"attempts": -1, "at": {}}], [{"attempts": True, "at": {}}], ["r"],
                [{"attempts": 1, "at": {"held": "yesterday"}}], [{"attempts": 1, "at": {}, "error": 5}]):
        report = check_evidence(_with_job(files, rounds=bad))
        assert (report.ok, report.reason) == (False, "unreadable"), (bad, report.detail)
