"""CLI of the evidence folder (issue 31, SPEC.md "Evidence"): `envelopay evidence FLOW --out
DIR` writes it from this agent's ledger; `envelopay evidence verify DIR` checks one offline
— no config, no ledger, no network — and says what it proves.

Exit codes (cli/output.py): 0 written / proven; 1 not proven (the reason: tampered,
unreadable, signature, thread, proof, result); 2 bad input (no such FLOW, DIR not a folder,
--out not empty); 3 the environment (the ledger unreachable, a config missing).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.options import JsonOpt
from envelopay.cli.output import FAILED, OK, USAGE, answers, fail, finish, ran

if TYPE_CHECKING:  # the report's type only: the checker loads when `verify` runs
    from envelopay.client.evidence_check import EvidenceReport

__all__ = ["evidence", "register"]

_Config = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]
_What = Annotated[str, typer.Argument(metavar="FLOW|verify", help="A flow id of this agent's ledger, or "
                                      "`verify` to check a folder.")]
_Dir = Annotated[Path | None, typer.Argument(metavar="[DIR]", help="verify: the evidence folder.")]
_Out = Annotated[Path | None, typer.Option("--out", help="FLOW: the folder to write (absent or empty).")]


def evidence(what: _What, folder: _Dir = None, out: _Out = None, config: _Config = Path("envelopay.toml"),
             as_json: JsonOpt = False) -> None:
    """Write FLOW's evidence folder (--out DIR), or `verify DIR`: check one offline and say
    what it proves (who asked, who paid how much and when, what was delivered)."""
    if what == "verify":
        _verify(folder, as_json)
    if folder is not None:
        fail(f"DIR: only `evidence verify DIR` takes a folder; write one with --out {folder}", USAGE,
             as_json=as_json, field="DIR")
    _write(what, out, config, as_json)


def _write(flow: str, out: Path | None, config: Path, as_json: bool) -> None:
    # lazy: the node, its rails and the ledger load only when the command runs
    from envelopay.client.evidence import evidence_for
    from envelopay.config import load_config

    if out is None:
        fail("--out: the folder to write the evidence to", USAGE, as_json=as_json, field="--out")
    with answers(as_json=as_json):
        cfg = load_config(config)
        done = asyncio.run(evidence_for(cfg, flow, out, now=datetime.now(UTC)))
    doc = ran("evidence", out=str(done.out), flow=done.flow_id, files=done.files, mails=done.mails,
              proofs=done.proofs, result=done.result, missing=done.missing)
    lines = [f"wrote {done.out}: {done.mails} mails, {done.proofs} proof(s), "
             f"{'the result hash' if done.result else 'no result'} ({done.files} files)"]
    lines += [f"not included: {m}" for m in done.missing]
    finish(as_json, doc, lines)


def _verify(folder: Path | None, as_json: bool) -> None:
    # lazy: dkimpy and the parser load only when the command runs
    from envelopay.client.evidence import read_folder
    from envelopay.client.evidence_check import check_evidence

    if folder is None or not folder.is_dir():
        fail(f"DIR: {folder or 'missing'}: wants the evidence folder", USAGE, as_json=as_json, field="DIR")
    with answers(as_json=as_json):
        report = check_evidence(read_folder(folder))
    code = OK if report.ok else FAILED
    doc = ran("evidence verify", code, folder=str(folder), proven=report.ok, reason=report.reason,
              detail=report.detail, checked=report.checked, claims=report.proven,
              missing=list(report.missing))
    finish(as_json, doc, () if as_json else _said(report))


def _refund_said(back: Any, onchain: set[str]) -> str:
    """The refund an OOPS carries, as a person reads it: the worker's signed word, and
    whether the folder holds the chain's verdict on it (`onchain`: the verified txs)."""
    if not isinstance(back, dict) or not (back.get("amount") and back.get("token") and back.get("chain")):
        return ""
    # lazy: the rails' asset registries (no config, no network) load only when money moved
    from envelopay.client.ledger_reads import chain_decimals
    from envelopay.rails.amounts import amount_with_units

    amount = amount_with_units(int(back["amount"]), back["token"],
                               chain_decimals([back["chain"]])(back["chain"], back["token"]))
    tx = (back.get("proof") or {}).get("tx", "?")
    checked = "checked on the chain: see refunded" if str(tx).lower() in onchain else "not checked on a chain"
    return (f", refunding {amount} on {back['chain']} to {back.get('wallet')}, tx {tx} "
            f"(its signed word, {checked})")


def _said(report: EvidenceReport) -> list[str]:
    """What a person reads: the claims, then what was checked, then what the folder lacks."""
    checked, claims = report.checked, report.proven
    if not report.ok:
        return [f"not proven ({report.reason}): {report.detail}", *(f"checked: {c}" for c in checked)]
    flow = claims["flow"]
    lines = [f"proven: flow {flow['id']} ({flow['kind']}) between {flow['local']} and {flow['peer']}"]
    asked = claims.get("asked")
    if asked:
        lines.append(f"asked:     {asked['by']} ordered {asked['order']} (task {asked['task']}, "
                     f"sha256 {asked['task_sha256']}) on {asked['date']}")
    paid = claims.get("paid") or []
    # lazy: the rails' asset registries (no config, no network) load only when money moved
    from envelopay.client.ledger_reads import chain_decimals
    from envelopay.rails.amounts import amount_with_units

    decimals = chain_decimals(p["chain"] for p in paid)
    for p in paid:
        amount = amount_with_units(int(p["amount"]), p["token"], decimals(p["chain"], p["token"]))
        lines.append(f"paid:      {p['by']} paid {amount} "
                     f"on {p['chain']}, "
                     f"tx {p['tx']}{_landed(p)}, from {p['payer']} to {p['payee']} at {p['tx_time']} "
                     f"(verified by {p['verified_by']} at {p['verified_at']})")
    done = claims.get("delivered")
    if done:
        lines.append(f"delivered: {done['by']} fulfilled {done['order_ref']} on {done['date']}, "
                     f"result sha256 {done['result_sha256']}")
    onchain = {str(r["tx"]).lower() for r in claims.get("refunded") or []}
    for o in claims.get("oops") or []:
        refund = _refund_said(o.get("refund"), onchain)
        lines.append(f"oops:      {o['by']} answered {o['code']} on {o['date']}{refund}")
    for r in claims.get("refunded") or []:
        amount = amount_with_units(int(r["amount"]), r["token"],
                                   chain_decimals([r["chain"]])(r["chain"], r["token"]))
        lines.append(f"refunded:  {amount} to {r['payee']} in tx {r['tx']}{_landed(r)} on {r['chain']}, "
                     f"from {r['payer']} (verified on the chain by {r['verified_by']} at {r['verified_at']})")
    lines += [f"checked:   {c}" for c in checked]
    lines += [f"not included: {m}" for m in report.missing]
    return lines


def _landed(paid: dict[str, Any]) -> str:
    """Where the transaction landed, when the rail said: Solana's slot, an EVM block."""
    for key in ("slot", "block"):
        if paid.get(key) is not None:
            return f" ({key} {paid[key]})"
    return ""


def register(app: typer.Typer) -> None:
    """Add this area's command to the top-level app."""
    app.command("evidence")(evidence)
