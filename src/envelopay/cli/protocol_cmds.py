"""CLI commands of the protocol area: parse, compose, conformance (each with --json)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from envelopay.cli.options import JsonOpt
from envelopay.cli.output import FAILED, OK, answers, emit, fail, finish, ran
from envelopay.protocol.compose import compose_message, message_json
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.protocol.parsed import Parsed


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app (in the order help lists them)."""
    app.command("parse")(parse_cmd)
    app.command("compose")(compose_cmd)
    app.command("conformance")(conformance_cmd)


def parse_cmd(
    file: Annotated[str, typer.Argument(help="A raw .eml file, or - for stdin.")] = "-",
    as_json: JsonOpt = False,
    re_v02: Annotated[
        bool, typer.Option("--re-v0.2", help="Apply v0.2.0's rule: strip Re: prefixes (never Fwd:).")
    ] = False,
    profile: Annotated[
        str, typer.Option("--profile", help="strict (default) or lenient (the interop profile, SPEC.md).")
    ] = "strict",
) -> None:
    """Parse one message and say what a receiver makes of it (exit 0 for any message)."""
    if profile not in ("strict", "lenient"):
        fail(f"--profile: {profile!r} is not strict or lenient")

    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        fail(f"FILE: cannot read {file}: {exc.strerror or exc}", field="FILE")
    parsed = parse(
        raw,
        options=ParseOptions(
            re_prefix="v0.2" if re_v02 else "v0.1",
            profile="lenient" if profile == "lenient" else "strict",
        ),
    )
    if as_json:
        typer.echo(json.dumps(parsed.to_json(), ensure_ascii=False))
        return
    _print_parsed(parsed)


def _print_parsed(parsed: Parsed) -> None:
    """What a receiver makes of one message, as lines for a person."""
    if not parsed.protocol:
        typer.echo(f"not protocol: subject {parsed.subject!r}")
        return
    kind = parsed.type.keyword if parsed.type is not None else "(unknown type)"
    state = "valid" if parsed.valid else "invalid"
    typer.echo(f"{kind} {state}" + (f" | {parsed.note}" if parsed.note else ""))
    typer.echo(f"  reply:      {'OOPS ' + parsed.oops.value if parsed.oops else 'no OOPS'}")
    for label, value in (
        ("id", parsed.id),
        ("from", parsed.from_addr),
        ("message-id", parsed.message_id),
        ("in-reply-to", parsed.in_reply_to),
    ):
        if value is not None:
            typer.echo(f"  {label + ':':<11} {value}")
    for problem in parsed.problems:
        typer.echo(f"  problem:    {problem.code.value}: {problem.detail}")
    for warning in parsed.warnings:
        typer.echo(f"  warning:    {warning}")
    if parsed.message is not None:
        typer.echo(message_json(parsed.message, indent=2))

def compose_cmd(
    type_: Annotated[str, typer.Argument(metavar="TYPE", help="One of the nine types (any case).")],
    sender: Annotated[str, typer.Option("--from", help="Sender address.")],
    recipient: Annotated[str, typer.Option("--to", help="Recipient address.")],
    json_file: Annotated[
        Path | None, typer.Option("--json-file", help="Body fields as a JSON object (options override).")
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Write the .eml here (else stdout).")] = None,
    domain: Annotated[str | None, typer.Option(help="Message-ID domain (default: the sender's).")] = None,
    message_id: Annotated[str | None, typer.Option("--message-id")] = None,
    in_reply_to: Annotated[str | None, typer.Option("--in-reply-to")] = None,
    references: Annotated[list[str] | None, typer.Option("--references")] = None,
    subject_note: Annotated[
        str | None, typer.Option("--subject-note", help="Subject note (default: note).")
    ] = None,
    v: Annotated[str | None, typer.Option("--v", help="Protocol version (default 0.1.0).")] = None,
    id_: Annotated[str | None, typer.Option("--id")] = None,
    note: Annotated[str | None, typer.Option("--note")] = None,
    amount: Annotated[str | None, typer.Option("--amount", help="Smallest-unit digit string.")] = None,
    token: Annotated[str | None, typer.Option("--token")] = None,
    chain: Annotated[str | None, typer.Option("--chain")] = None,
    wallet: Annotated[str | None, typer.Option("--wallet")] = None,
    proof: Annotated[str | None, typer.Option("--proof", help="Proof as a JSON object.")] = None,
    task: Annotated[str | None, typer.Option("--task", help="JSON object or text.")] = None,
    result: Annotated[str | None, typer.Option("--result", help="JSON value or text.")] = None,
    rails: Annotated[str | None, typer.Option("--rails", help="METHODS rails as a JSON array.")] = None,
    give: Annotated[str | None, typer.Option("--give", help="OFFER give as a JSON object.")] = None,
    want: Annotated[str | None, typer.Option("--want", help="OFFER want as a JSON object.")] = None,
    code: Annotated[str | None, typer.Option("--code", help="OOPS error code.")] = None,
    ref: Annotated[str | None, typer.Option("--ref")] = None,
    order_ref: Annotated[str | None, typer.Option("--order-ref")] = None,
    invoice_ref: Annotated[str | None, typer.Option("--invoice-ref")] = None,
    offer_ref: Annotated[str | None, typer.Option("--offer-ref")] = None,
    which_ref: Annotated[str | None, typer.Option("--which-ref")] = None,
    due: Annotated[str | None, typer.Option("--due")] = None,
    fallback: Annotated[str | None, typer.Option("--fallback")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compose a message from options or a JSON file and write the .eml (--json: one
    document with its Message-ID, and the .eml itself when there is no --out)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.protocol.fields import message_from_fields, message_type

    with answers():
        kind = message_type(type_)
    data = _json_file_fields(json_file) if json_file is not None else {}
    plain = {
        "v": v, "id": id_, "note": note, "amount": amount, "token": token, "chain": chain,
        "wallet": wallet, "ref": ref, "order_ref": order_ref, "invoice_ref": invoice_ref,
        "offer_ref": offer_ref, "which_ref": which_ref, "due": due, "fallback": fallback,
    }  # fmt: skip
    with answers():
        message = message_from_fields(
            kind, data, plain=plain, code=code, json_or_text={"task": task, "result": result},
            json_fields={"proof": proof, "rails": rails, "give": give, "want": want},
        )
    msg_domain = domain or (sender.rsplit("@", 1)[-1] if "@" in sender else "")
    with answers():
        raw, mid = compose_message(
            message,
            sender=sender,
            recipient=recipient,
            domain=msg_domain,
            now=datetime.now(UTC),
            in_reply_to=in_reply_to,
            references=tuple(references or ()),
            message_id=message_id,
            note=subject_note,
        )
    _write_composed(raw, mid, kind.keyword, out, as_json)


def _json_file_fields(json_file: Path) -> dict[str, Any]:
    """The body fields --json-file holds: one JSON object, read as any JSON from outside."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.protocol import outside_json

    try:
        loaded = outside_json.loads(json_file.read_bytes())
    except OSError as exc:
        fail(f"--json-file: cannot read {json_file}: {exc.strerror or exc}")
    except outside_json.OutsideJsonError as exc:
        fail(f"--json-file: {exc}")
    if not isinstance(loaded, dict):
        fail("--json-file: must hold a JSON object")
    return dict(loaded)


def _write_composed(raw: bytes, mid: str, keyword: str, out: Path | None, as_json: bool) -> None:
    """The composed .eml to --out or stdout; under --json, the one document (holding the
    .eml itself when there is no --out)."""
    if as_json and out is None:
        eml = raw.decode("utf-8", errors="replace")
        emit(ran("compose", type=keyword, message_id=mid, out=None, eml=eml))
        return
    if out is None:
        sys.stdout.buffer.write(raw)
        sys.stdout.buffer.flush()
        return
    try:
        out.write_bytes(raw)
    except OSError as exc:
        fail(f"--out: cannot write {out}: {exc.strerror or exc}")
    typer.echo(f"wrote {out}", err=True)
    if as_json:
        emit(ran("compose", type=keyword, message_id=mid, out=str(out), eml=None))

def conformance_cmd(
    root: Annotated[
        Path | None, typer.Option("--root", help="Corpus directory (default fixtures/conformance).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="List passing vectors too.")] = False,
    target: Annotated[
        str | None, typer.Option("--target", help="Run the corpus against a live address instead.")
    ] = None,
    config: Annotated[str, typer.Option("--config", help="Config file for --target.")] = "envelopay.toml",
    profile: Annotated[
        str,
        typer.Option(
            "--profile", help="strict (default) or lenient: run every vector under the profile."
        ),
    ] = "strict",
    as_json: JsonOpt = False,
) -> None:
    """Run the conformance corpus against this engine; ends with `N passed, N failed`."""
    if profile not in ("strict", "lenient"):
        fail(f"--profile: {profile!r} is not strict or lenient")
    if target is not None:
        _conformance_live(target, config, as_json)
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.testing.conformance import load_manifest, run_manifest

    try:
        vectors = load_manifest(root)
    except (OSError, ValueError) as exc:
        fail(f"cannot load the manifest: {exc}")
    report = run_manifest(vectors, profile="lenient" if profile == "lenient" else "strict")
    if as_json:
        failures = [{"file": r.vector.file, "rule": r.vector.rule, "mismatches": list(r.mismatches)}
                    for r in report.results if not r.ok]
        finish(True, ran("conformance", FAILED if report.failed else OK, profile=profile,
                            passed=report.passed, failed=report.failed, failures=failures))
    for res in report.results:
        if not res.ok:
            typer.echo(f"FAIL {res.vector.file}  [{res.vector.rule}]")
            for line in res.mismatches:
                typer.echo(f"     {line}")
        elif verbose:
            only = "  (lenient only)" if res.vector.lenient_only else ""
            typer.echo(f"ok   {res.vector.file}{only}")
    if profile == "strict":
        count = sum(1 for v in vectors if v.lenient_only)
        typer.echo(f"{count} vectors are valid only under --profile lenient (checked here as strict)")
    typer.echo(report.summary())
    if report.failed:
        raise typer.Exit(1)


def _conformance_live(target: str, config: str, as_json: bool) -> None:
    """The corpus against a live address; exits with run_live's code."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.client.live_conformance import run_live

    lines: list[str] = []  # under --json the report's lines go to stderr, and into the document

    def echo(line: str) -> None:
        lines.append(line)
        typer.echo(line, err=as_json)

    code = run_live(target, config, echo=echo)
    if as_json:
        emit(ran("conformance", code, target=target, lines=lines))
    raise typer.Exit(code)
