"""The evidence folder of a paid job that ended without a FULFILL still holds the worker's
job record (job.json, listed in the manifest and sealed like every file): a job that failed
and was refunded, one held for the operator, one retried (`jobs retry`) that ended refunded.
The worker's ledger writes each folder; `evidence verify`, offline, reads the record as the
worker's word (state, attempts, times, refund, earlier rounds) and says whether its refund
is the one a signed OOPS carries; one byte changed in job.json fails as any sealed file; a
folder written before job.json (none) verifies as before. Through the real path (garden,
DKIM, SQLite ledger, local Solana, the job runner), as the other evidence flow tests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.worker._jobs_kit import Served, failing_jobs, job_in, paid_order
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.demo import PRICE, DemoWorld
from envelopay.client.evidence import read_folder, write_evidence
from envelopay.client.evidence_check import EvidenceReport, check_evidence
from envelopay.client.evidence_manifest import JOB, MANIFEST, SEAL, sha256_hex
from envelopay.node.job_admin import refund_job, retry_held

CHAIN = "solana-local"
cli = CliRunner()


@pytest.fixture
async def served(demo_world: DemoWorld) -> AsyncIterator[Served]:
    """The demo worker taking paid orders as jobs of a task that always fails: `review`
    refunds at once, `review_hold` waits held for the operator."""
    async with failing_jobs(demo_world, ("review", "refund"), ("review_hold", "hold")) as served:
        yield served



async def _folder(w: DemoWorld, flow: str, out: Path) -> dict[str, bytes]:
    """The worker's folder of `flow`, written once every mail's delivery returned (the
    WAIT a held job's runner queued too: drained here, its bytes kept as it is sent)."""
    await w.worker.drain()
    for node in (w.worker, w.buyer):
        await node.settle()
    assert w.worker.evidence is not None
    done = await write_evidence(w.worker.store, w.worker.evidence, flow, out, now=datetime.now(UTC),
                                rails=w.worker.rails)
    assert done.job and not done.result and done.missing == [], done.missing
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["job"] == JOB and manifest["result"] is None and JOB in manifest["files"]
    assert not (out / "result.json").exists()  # no FULFILL: the record's one place is job.json
    return read_folder(out)


def _verified(files: dict[str, bytes]) -> EvidenceReport:
    report = check_evidence(files)
    assert report.ok, (report.reason, report.detail)
    said = f"the job's record ({JOB}, the worker's word"
    assert any(c.startswith(said) for c in report.checked), report.checked
    return report


def _reseal(files: dict[str, bytes], manifest: dict[str, Any], **changed: bytes | None) -> dict[str, bytes]:
    """The folder with `changed` files (None: removed) and `manifest`, its hashes and seal
    redone: what an older producer, or a forger, would hand over."""
    out = {k: v for k, v in files.items() if k not in changed}
    out |= {k: v for k, v in changed.items() if v is not None}
    manifest["files"] = {k: sha256_hex(v) for k, v in out.items() if k not in (MANIFEST, SEAL)}
    body = json.dumps(manifest, indent=2, sort_keys=True).encode() + b"\n"
    return {**out, MANIFEST: body, SEAL: sha256_hex(body).encode() + b"\n"}


def _assert_sealed(files: dict[str, bytes]) -> None:
    """One byte of job.json changed fails as any sealed file; a folder without job.json (as
    written before it existed) verifies, with no job said; a record that is not one, resealed,
    is unreadable, never raised."""
    raw = files[JOB]
    for at in (raw.index(b'"state"') + 9, len(raw) // 2):
        flipped = {**files, JOB: raw[:at] + bytes([raw[at] ^ 0x01]) + raw[at + 1:]}
        bad = check_evidence(flipped)
        assert (bad.ok, bad.reason) == (False, "tampered"), bad.detail
    manifest = json.loads(files[MANIFEST])
    older = _reseal(files, {k: v for k, v in manifest.items() if k != "job"}, **{JOB: None})
    before = check_evidence(older)
    assert before.ok and before.proven["job"] is None, before.detail
    assert not any(JOB in c for c in before.checked)
    both = _reseal(files, {**manifest, "result": JOB})  # the record has one place, not two
    assert (check_evidence(both).ok, check_evidence(both).reason) == (False, "unreadable")
    record = json.loads(raw)["job"]
    for bad_job in ("x", {**record, "state": 3}, {**record, "attempts": -1},
                    {**record, "at": {"held": "soon"}}, {**record, "rounds": [{"attempts": 1}]},
                    {**record, "refund": "yes"}):
        forged = _reseal(files, dict(manifest), **{JOB: json.dumps({"job": bad_job}).encode()})
        said = check_evidence(forged)
        assert (said.ok, said.reason) == (False, "unreadable"), (bad_job, said.detail)


async def test_a_failed_and_refunded_job_s_folder_holds_its_record(served: Served, tmp_path: Path) -> None:
    w = served.w
    flow = (await paid_order(w, "review", CHAIN))[0]
    job = await job_in(w, flow, "refunded")
    out = tmp_path / "ev"
    files = await _folder(w, flow, out)
    report = _verified(files)
    said = report.proven["job"]
    assert (said["job_id"], said["task"], said["state"]) == (job.job_id, "review", "refunded")
    assert said["attempts"] >= 1 and said["error"] == "task review failed: RuntimeError"
    assert {"queued", "running", "refunded"} <= set(said["at"]) and said["rounds"] == []
    assert job.refund is not None and said["refund"]["proof"] == job.refund["proof"]
    assert said["refund"]["amount"] == str(PRICE)
    assert said["refund_in_oops"] is True  # the record's refund is the one the signed OOPS carries
    [back] = report.proven["refunded"]  # and the same transfer, checked on the chain
    assert back["amount"] == str(PRICE) and back["payee"] == w.wallets["buyer_sol"]
    # The person's line says it; --json carries the same claim.
    text = (await asyncio.to_thread(cli.invoke, app, ["evidence", "verify", str(out)])).stdout
    assert f"{job.job_id} (task review) refunded after {said['attempts']} attempt(s)" in text, text
    assert "its refund the one a signed OOPS of the folder carries" in text
    doc = json.loads((await asyncio.to_thread(cli.invoke, app, ["evidence", "verify", str(out), "--json"])
                      ).stdout)
    assert doc["claims"]["job"]["state"] == "refunded" and doc["exit"] == 0
    _assert_sealed(files)


async def test_a_held_job_s_folder_holds_its_record(served: Served, tmp_path: Path) -> None:
    w = served.w
    flow = (await paid_order(w, "review_hold", CHAIN))[0]
    job = await job_in(w, flow, "held")
    files = await _folder(w, flow, tmp_path / "ev")
    report = _verified(files)
    said = report.proven["job"]
    assert (said["job_id"], said["state"], said["refund"]) == (job.job_id, "held", None)
    assert "held" in said["at"] and "refund_in_oops" not in said  # no refund yet, nothing to compare
    assert report.proven["oops"] == [] and report.proven["refunded"] == []  # the buyer was not answered yet
    assert [p["amount"] for p in report.proven["paid"]] == [str(PRICE)]  # paid and waiting
    _assert_sealed(files)


async def test_a_retried_job_that_ended_refunded_lists_its_rounds(served: Served, tmp_path: Path) -> None:
    w = served.w
    flow = (await paid_order(w, "review_hold", CHAIN))[0]
    held = await job_in(w, flow, "held")
    # The operator retries (it fails again, held), then refunds it.
    assert retry_held(w.worker.store, held.job_id, datetime.now(UTC)).done
    served.runner.wake()
    again = await job_in(w, flow, "held")
    assert len(again.rounds) == 1
    assert (await refund_job(served.cfg, again.job_id, datetime.now(UTC))).done
    await job_in(w, flow, "refunded")
    files = await _folder(w, flow, tmp_path / "ev")
    report = _verified(files)
    said = report.proven["job"]
    assert said["state"] == "refunded" and said["refund_in_oops"] is True
    [first] = said["rounds"]  # how round 1 ended, before the retry
    assert first["attempts"] >= 1 and "held" in first["at"]
    assert first["error"] == "task review_hold failed: RuntimeError"
    assert first["at"]["held"] <= said["at"]["queued"] <= said["at"]["refunded"]
    assert any("1 earlier round(s)" in c for c in report.checked)
    _assert_sealed(files)
