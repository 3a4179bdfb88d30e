"""`envelopay parse`, `compose` and `conformance`, run through the real typer app."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.testing.conformance import default_root

RUNNER = CliRunner()
CORPUS = default_root()
KEYS = ["protocol", "type", "valid", "oops", "id", "message_id", "body"]


def test_parse_json_keys_and_values() -> None:
    res = RUNNER.invoke(app, ["parse", str(CORPUS / "valid/pay/01-json-part.eml"), "--json"])
    assert res.exit_code == 0
    out = json.loads(res.stdout)
    assert list(out)[:7] == KEYS
    assert out["protocol"] is True and out["type"] == "pay" and out["valid"] is True and out["oops"] is None
    assert out["id"] == "pay_5e6f" and out["body"]["amount"] == "30000000"


def test_parse_stdin_and_invalid_input_exit_0() -> None:
    res = RUNNER.invoke(app, ["parse", "-", "--json"], input=b"Subject: REFUND\r\n\r\n")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["oops"] == "unknown_type"
    res = RUNNER.invoke(app, ["parse", "--json"], input=b"\xff\x00 garbage")
    assert res.exit_code == 0 and json.loads(res.stdout)["protocol"] is False


def test_parse_summary() -> None:
    res = RUNNER.invoke(app, ["parse", str(CORPUS / "invalid/missing/invoice-wallet.eml")])
    assert res.exit_code == 0
    assert "INVOICE invalid" in res.stdout and "OOPS missing_wallet" in res.stdout


def test_parse_re_option() -> None:
    path = str(CORPUS / "subject/v0.2/re.eml")
    assert json.loads(RUNNER.invoke(app, ["parse", path, "--json"]).stdout)["protocol"] is False
    assert json.loads(RUNNER.invoke(app, ["parse", path, "--json", "--re-v0.2"]).stdout)["valid"] is True


def test_parse_unreadable_input_exits_2(tmp_path: Path) -> None:
    res = RUNNER.invoke(app, ["parse", str(tmp_path / "missing.eml")])
    assert res.exit_code == 2 and "cannot read" in res.stderr
    res = RUNNER.invoke(app, ["parse", str(tmp_path)])
    assert res.exit_code == 2


def test_compose_options_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "pay.eml"
    res = RUNNER.invoke(app, [
        "compose", "PAY", "--from", "a@x.test", "--to", "b@y.test", "--id", "p1", "--amount", "500",
        "--token", "SOL", "--chain", "solana", "--proof", '{"tx": "abc"}', "--note", "héllo",
        "--in-reply-to", "<i@y.test>", "--references", "<i@y.test>", "--out", str(out),
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    parsed = json.loads(RUNNER.invoke(app, ["parse", str(out), "--json"]).stdout)
    assert parsed["valid"] and parsed["type"] == "pay" and parsed["body"]["amount"] == "500"
    assert parsed["note"] == "héllo" and parsed["in_reply_to"] == "<i@y.test>"
    assert parsed["message_id"].endswith("@x.test>")


def test_compose_json_file_to_stdout(tmp_path: Path) -> None:
    body = tmp_path / "offer.json"
    body.write_text(json.dumps({
        "id": "o1", "wallet": "w", "want": {"amount": "1", "token": "USDC", "chain": "base"},
        "give": {"amount": "2", "token": "SOL", "chain": "solana", "to": "t", "proof": {"tx": "z"}},
    }))  # fmt: skip
    res = RUNNER.invoke(app, ["compose", "offer", "--from", "a@x.test", "--to", "b@y.test",
                              "--json-file", str(body), "--note", "deal"])  # fmt: skip
    assert res.exit_code == 0
    parsed = RUNNER.invoke(app, ["parse", "--json"], input=res.stdout_bytes)
    out = json.loads(parsed.stdout)
    assert out["valid"] and out["type"] == "offer" and out["body"]["give"]["amount"] == "2"


def test_compose_bad_fields_name_the_field() -> None:
    base = ["compose", "invoice", "--from", "a@x.test", "--to", "b@y.test", "--id", "i1", "--token", "SOL",
            "--chain", "solana", "--wallet", "w"]  # fmt: skip
    res = RUNNER.invoke(app, [*base, "--amount", "1.5"])
    assert res.exit_code == 2 and "amount" in res.stderr
    res = RUNNER.invoke(app, base)
    assert res.exit_code == 2 and "amount" in res.stderr and "required" in res.stderr.lower()
    res = RUNNER.invoke(app, ["compose", "REFUND", "--from", "a@x.test", "--to", "b@y.test"])
    assert res.exit_code == 2 and "TYPE" in res.stderr
    res = RUNNER.invoke(app, ["compose", "which", "--from", "a@x.test", "--to", "b@y.test\r\nBcc: v@e.test"])
    assert res.exit_code == 2 and "recipient" in res.stderr
    res = RUNNER.invoke(app, ["compose", "pay", "--from", "a@x.test", "--to", "b@y.test", "--proof", "{bad"])
    assert res.exit_code == 2 and "--proof" in res.stderr


def test_conformance_command_passes() -> None:
    res = RUNNER.invoke(app, ["conformance"])
    assert res.exit_code == 0
    last = res.stdout.strip().splitlines()[-1]
    n = len(json.loads((CORPUS / "manifest.json").read_text())["vectors"])
    assert last == f"{n} passed, 0 failed"


def test_conformance_command_reports_failures(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    shutil.copytree(CORPUS / "subject", root / "subject")
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    keep = [v for v in manifest["vectors"] if v["file"].startswith("subject/protocol/")]
    keep[0]["expect"]["valid"] = False  # a wrong expectation must show up as a failure
    (root / "manifest.json").write_text(json.dumps({**manifest, "vectors": keep}))
    res = RUNNER.invoke(app, ["conformance", "--root", str(root)])
    assert res.exit_code == 1
    assert f"FAIL {keep[0]['file']}" in res.stdout
    assert res.stdout.strip().splitlines()[-1] == f"{len(keep) - 1} passed, 1 failed"


def test_parse_and_conformance_under_the_lenient_profile() -> None:
    reply = str(CORPUS / "clients/lenient/re-methods-reply.eml")
    strict = json.loads(RUNNER.invoke(app, ["parse", reply, "--json"]).stdout)
    assert (strict["protocol"], strict["warnings"]) == (False, [])
    res = RUNNER.invoke(app, ["parse", reply, "--json", "--profile", "lenient"])
    loose = json.loads(res.stdout)
    assert res.exit_code == 0 and (loose["type"], loose["valid"]) == ("methods", True)
    assert [w for w in loose["warnings"] if w.startswith("lenient:")] == [
        "lenient: Re: subject read as METHODS from the body's first line",
        "lenient: METHODS rail without price: price on request",
    ]
    assert RUNNER.invoke(app, ["parse", reply, "--profile", "loose"]).exit_code == 2
    vectors = json.loads((CORPUS / "manifest.json").read_text())["vectors"]
    n, only = len(vectors), sum(1 for v in vectors if v.get("lenient_only"))
    res = RUNNER.invoke(app, ["conformance", "--profile", "lenient", "--verbose"])
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == f"{n} passed, 0 failed"
    assert res.stdout.count("(lenient only)") == only > 0
    res = RUNNER.invoke(app, ["conformance"])
    assert f"{only} vectors are valid only under --profile lenient" in res.stdout
