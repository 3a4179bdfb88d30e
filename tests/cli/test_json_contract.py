"""The output contract (README "Output and exit codes"): every command has --json, and
run with it prints exactly one JSON document on stdout, valid against the schema kept in
schemas/cli-output.schema.json, with the exit code the document says.

The command tree is read from typer, so a new command without --json, or without a step
here that runs it, fails `test_every_command_has_json_and_a_step`. The steps run in order
on one world (a step may use what an earlier one left in `world.saved`), so run the
module whole rather than one step with -k."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.enforcer.client.http_client import EnforcerClient

from .conftest import CLIENT, WORKER, World

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cli-output.schema.json").read_text())
runner = CliRunner()

# The one command without --json, and why: its stdout is the MCP protocol (JSON-RPC) itself.
EXEMPT = {"mcp": "stdout is the MCP stdio channel (JSON-RPC messages), not one document"}
# Long-running commands: the world serves them; their document is the one they print when ready.
SERVED = {"worker serve": "worker", "enforcer serve": "enforcer", "garden serve": "garden"}


def commands() -> list[str]:
    """Every leaf command of the CLI, as typed (`agent policy show`)."""
    out: list[str] = []

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None)
        if subs is None:
            out.append(" ".join(path))
            return
        for name, sub in subs.items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def has_json(path: str) -> bool:
    cmd: Any = typer.main.get_command(app)
    for name in path.split():
        cmd = cmd.commands[name]
    return any("--json" in getattr(p, "opts", ()) for p in cmd.params)


Args = Callable[[World], list[str]]
# (command, its arguments, the exit code, the schema definition its document must match)
Step = tuple[str, Args, int, str]


def _which_flow(w: World, doc: dict[str, Any]) -> None:
    w.saved["flow"] = doc["flow"]["id"]


def _done_job(w: World, doc: Any) -> None:
    w.saved["job"] = next(j["job"] for j in doc["jobs"] if j["state"] == "done" and j["task"] == "digest")


def _first_mail(w: World, doc: Any) -> None:
    w.saved["mail"] = next(r["id"] for r in doc if r["subject"] == "contract")


async def _pending_sends(w: World) -> list[str]:
    """The agent `sdr` asks for three sends no policy allows: each waits for approval."""
    async with EnforcerClient(w.enforcer.ready["listening"], w.saved["agent_token"]) as agent:
        held = [await agent.send({"to": to, "from": "sdr@agents.test", "subject": "hi"})
                for to in ("ok@partner.test", "refuse@partner.test", "later@partner.test")]
    return [h.approval_id or "" for h in held]


def _c(w: World) -> list[str]:
    return ["-c", str(w.ccfg)]


def _eml(w: World) -> Path:
    path = w.tmp / "plain.eml"
    path.write_bytes(b"From: peer@garden.local\r\nTo: client@garden.local\r\nSubject: contract\r\n"
                     b"Message-ID: <contract@garden.local>\r\n\r\nhello\r\n")
    return path


STEPS: list[Step] = [
    ("version", lambda w: [], 0, "version"),
    ("compose", lambda w: ["WHICH", "--from", CLIENT, "--to", WORKER], 0, "compose"),
    ("parse", lambda w: [str(_eml(w))], 0, "parse"),
    ("conformance", lambda w: [], 0, "conformance"),
    ("rails", lambda w: [], 0, "rails"),
    ("verify", lambda w: ["--chain", "solana-local", "--token", "USDC", "--amount", "1", "--to",
                          "11111111111111111111111111111111", "--tx", "abc", "--rpc", "http://127.0.0.1:9/"],
     1, "verify"),
    ("pay-onchain", lambda w: ["--chain", "solana-local", "--token", "SOL", "--amount", "5", "--to",
                               "11111111111111111111111111111111", "--keypair", str(w.tmp / "none.json")],
     2, "error"),
    ("demo", lambda w: [], 0, "demo"),
    ("init", lambda w: ["--address", "third@garden.local", "--dir", str(w.tmp / "third")], 0, "init"),
    ("call", lambda w: ["kv-worker@garden.local", "--request", '{"key": "spec.version"}', *_c(w),
                        "--timeout", "60"],
     0, "call"),
    ("which", lambda w: [WORKER, *_c(w), "--wait", "--timeout", "60"], 0, "client"),
    ("order", lambda w: [WORKER, "--task", '{"name": "digest", "text": "a b"}', *_c(w), "--wait",
                         "--timeout", "60"], 0, "client"),
    # After `which` (its METHODS named the status extension): WHATSUP about the ORDER → WAIT.
    ("status", lambda w: [w.saved["order"], *_c(w), "--timeout", "60"], 0, "status"),
    ("pay", lambda w: [WORKER, "--amount", "-1", "--token", "USDC", "--chain", "solana-local", "--wallet",
                       "11111111111111111111111111111111", *_c(w)], 2, "error"),
    ("invoice", lambda w: [WORKER, "--amount", "1000", "--token", "USDC", "--chain", "solana-local",
                           "--order", "ord_contract", *_c(w)], 0, "client"),
    # The worker has no [[exchange]]: it does not take the pair, so nothing is paid (exit 1).
    ("offer", lambda w: [WORKER, "--give-amount", "1000", "--give-token", "SOL", "--give-chain",
                         "solana-local", "--give-to", "11111111111111111111111111111111",
                         "--want-amount", "1", "--want-token", "USDC", "--want-chain", "base-local", *_c(w),
                         "--timeout", "60"],
     1, "error"),
    ("accept", lambda w: [WORKER, "--offer", "ofr_x", "--amount", "abc", "--token", "USDC", "--chain",
                          "base-local", *_c(w)], 2, "error"),
    ("fulfill", lambda w: [WORKER, "--order", "ord_contract", "--result", '{"ok": true}', "--flow",
                           w.saved["flow"], *_c(w)], 2, "error"),  # we were never ordered: refused, 2
    ("oops", lambda w: [WORKER, "--code", "tx_not_found", "--note", "none", "--flow", w.saved["flow"],
                        *_c(w)], 0, "client"),
    ("flows", lambda w: _c(w), 0, "flows"),
    ("show", lambda w: [w.saved["flow"], *_c(w)], 0, "show"),
    ("outbox", lambda w: _c(w), 0, "outbox"),
    ("drain", lambda w: _c(w), 0, "drain"),
    ("fund", lambda w: [CLIENT, "--sol", "1", "--home", str(w.tmp / "no-devnet")], 3, "error"),
    ("devnet up", lambda w: ["--home", str(w.tmp / "no-devnet"), "--base-node", "bogus"], 2, "error"),
    ("devnet status", lambda w: ["--home", str(w.tmp / "no-devnet")], 3, "error"),
    ("devnet down", lambda w: ["--home", str(w.tmp / "no-devnet")], 3, "error"),
    ("garden deliver", lambda w: [str(_eml(w)), "--to", CLIENT, "--endpoint", str(w.garden_sock),
                                  "--from", "peer@garden.local", "--user", "peer@garden.local"],
     0, "garden_deliver"),
    ("garden account", lambda w: ["u", "--address", CLIENT, "--accounts", str(w.tmp / "accounts")],
     0, "garden_account"),
    ("garden compact", lambda w: ["--root", str(w.tmp / "garden")], 0, "garden_compact"),
    ("mail check", lambda w: ["--config", str(w.ccfg)], 0, "mail_records"),
    ("mail search", lambda w: ["contract", "--config", str(w.ccfg)], 0, "mail_records"),
    ("mail read", lambda w: [w.saved["mail"], "--config", str(w.ccfg)], 0, "mail_records"),
    ("mail thread", lambda w: [w.saved["mail"], "--config", str(w.ccfg)], 0, "mail_records"),
    ("mail reply", lambda w: [w.saved["mail"], "-m", "thanks", "--smtp", f"127.0.0.1:{w.smtp_port}",
                              "--security", "none", "--config", str(w.ccfg)], 0, "mail_reply"),
    ("mail dismiss", lambda w: [w.saved["mail"], "--config", str(w.ccfg)], 0, "mail_action"),
    ("mail archive", lambda w: [w.saved["mail"], "--config", str(w.ccfg)], 0, "mail_action"),
    ("mail delete", lambda w: [w.saved["mail"], "--config", str(w.ccfg)], 0, "mail_action"),
    ("mail compact", lambda w: ["--config", str(w.ccfg)], 0, "mail_compact"),
    ("mail fetch", lambda w: ["--imap", "127.0.0.1:9", "--user", "u", "--no-tls", "--config", str(w.ccfg)],
     3, "error"),  # no $ENVELOPAY_IMAP_PASSWORD: a secret not set, named, before any connection
    ("mail contacts add", lambda w: ["peer@garden.local", "--name", "Peer", "--config", str(w.ccfg)],
     0, "contact"),
    ("mail contacts edit", lambda w: ["peer@garden.local", "--note", "n", "--config", str(w.ccfg)],
     0, "contact"),
    ("mail contacts list", lambda w: ["--config", str(w.ccfg)], 0, "contacts"),
    ("mail contacts remove", lambda w: ["peer@garden.local", "--config", str(w.ccfg)], 0, "mail_action"),
    ("ledger compact", lambda w: _c(w), 0, "ledger_compact"),
    ("evidence", lambda w: [w.saved["flow"], "--out", str(w.tmp / "evidence"), *_c(w)], 0, "evidence"),
    # The world has no chain, so no job here was paid and none is held: the ORDER's free job
    # is listed, and refunding or retrying it (done, not held) is bad input, exit 2. A held
    # paid job refunded and retried for real: tests/worker/test_refund_served.py.
    ("jobs list", lambda w: ["-c", str(w.wcfg)], 0, "jobs_list"),
    ("jobs refund", lambda w: [w.saved["job"], "-c", str(w.wcfg)], 2, "error"),
    ("jobs retry", lambda w: [w.saved["job"], "-c", str(w.wcfg)], 2, "error"),
    ("refunds list", lambda w: ["--all", "-c", str(w.wcfg)], 0, "refunds_list"),
    ("refunds retry", lambda w: ["pay:solana-local:none", "-c", str(w.wcfg)], 2, "error"),
    ("agent create", lambda w: ["sdr", "--address", "sdr@agents.test", *w.operator], 0, "agent_create"),
    ("agent list", lambda w: w.operator, 0, "agent_list"),
    ("agent policy set", lambda w: ["sdr", "--payee", "partner.test", *w.operator], 0, "agent_policy_set"),
    ("agent policy show", lambda w: ["sdr", *w.operator], 0, "policy"),
    ("agent balances", lambda w: ["sdr", *w.operator], 0, "balances"),
    ("agent wallet add", lambda w: ["sdr", "--chain", "solana-local", *w.operator], 2, "error"),
    ("agent wallet list", lambda w: ["sdr", *w.operator], 0, "agent_wallet_list"),
    ("approvals list", lambda w: w.operator, 0, "approvals_list"),
    ("approvals show", lambda w: [w.saved["pending"][1], *w.operator], 0, "approvals_show"),
    ("approvals approve", lambda w: [w.saved["pending"][0], *w.operator], 0, "approvals_decision"),
    ("approvals reject", lambda w: [w.saved["pending"][2], *w.operator], 0, "approvals_decision"),
    ("approvals retry", lambda w: ["no-such-send", *w.operator], 2, "error"),
    ("agent kill", lambda w: ["sdr", *w.operator], 0, "agent_kill"),
    ("enforcer compact", lambda w: ["--db", w.enforcer_db], 0, "enforcer_compact"),
]

# What a step leaves for later ones.
AFTER: dict[str, Callable[[World, Any], None]] = {
    "order": lambda w, doc: w.saved.update(order=doc["flow"]["id"]),
    "which": _which_flow,
    "jobs list": _done_job,
    "mail search": _first_mail,
    "agent create": lambda w, doc: w.saved.update(agent_token=doc["token"]),
    "agent list": lambda w, doc: w.saved.update(pending=asyncio.run(_pending_sends(w))),
}


# What a step needs run before it (each once per world): so every step also runs alone
# (`pytest -k "mail delete"`), not only after the steps above it in the file.
NEEDS: dict[str, tuple[str, ...]] = {
    "fulfill": ("which",),
    "oops": ("which",),
    "show": ("which",),
    "mail search": ("garden deliver",),
    **{f"mail {c}": ("mail search",) for c in ("read", "thread", "reply", "dismiss", "archive", "delete")},
    "mail compact": ("mail check",),  # a maintenance command never makes its store
    "ledger compact": ("which",),
    "status": ("which", "order"),
    "evidence": ("which",),
    "jobs list": ("order",),
    "jobs refund": ("jobs list",),
    "jobs retry": ("jobs list",),
    "mail contacts edit": ("mail contacts add",),
    "mail contacts remove": ("mail contacts add",),
    **{c: ("agent create",) for c in ("agent list", "agent policy set", "agent balances", "agent wallet add",
                                      "agent wallet list", "agent kill")},
    "agent policy show": ("agent policy set",),
    "approvals list": ("agent list",),
    "approvals show": ("agent list",),
    "approvals approve": ("agent list",),
    "approvals reject": ("agent list",),
}


def run_step(world: World, step: Step) -> Any:
    """Run `step` (after what it needs, once each) and check its document."""
    command, args, code, definition = step
    ran: set[str] = world.saved.setdefault("ran", set())
    for before in NEEDS.get(command, ()):
        if before not in ran:
            run_step(world, next(s for s in STEPS if s[0] == before))
    res = runner.invoke(app, [*command.split(), *args(world), "--json"])
    assert res.exit_code == code, (command, res.stdout, res.stderr)
    doc = json.loads(res.stdout)  # exactly one document: anything else on stdout fails here
    check(doc, definition)
    if isinstance(doc, dict) and "exit" in doc:
        assert doc["exit"] == code
    if command in AFTER:
        AFTER[command](world, doc)
    ran.add(command)
    return doc


def check(doc: Any, definition: str) -> None:
    """Valid against the whole schema, and against the definition of its command."""
    jsonschema.validate(doc, SCHEMA)
    jsonschema.validate(doc, {**SCHEMA, "$ref": f"#/$defs/{definition}"} | {"anyOf": [True]})


def test_every_command_has_json_and_a_step() -> None:
    every = commands()
    missing_json = [c for c in every if c not in EXEMPT and not has_json(c)]
    assert missing_json == [], f"commands without --json: {missing_json}"
    stepped = {s[0] for s in STEPS} | set(SERVED)
    no_step = [c for c in every if c not in EXEMPT and c not in stepped]
    assert no_step == [], f"commands the contract test does not run: {no_step}"
    assert not (stepped - set(every)), f"steps for commands that do not exist: {stepped - set(every)}"


def test_servers_print_one_ready_document(world: World) -> None:
    for command, name in SERVED.items():
        served = getattr(world, name)
        assert served.ready["command"] == command
        check(served.ready, command.replace(" ", "_"))
    assert world.worker.ready["address"] == WORKER and world.worker.ready["garden"]
    assert world.enforcer.ready["listening"].startswith("http://127.0.0.1:")
    assert set(world.garden.ready["maildirs"]) == {"a@garden.local"}


@pytest.mark.parametrize("step", STEPS, ids=[s[0] for s in STEPS])
def test_each_command_prints_one_document_with_its_exit_code(world: World, step: Step) -> None:
    run_step(world, step)


def test_every_need_names_a_step() -> None:
    names = {s[0] for s in STEPS}
    assert {n for needs in NEEDS.values() for n in needs} <= names and set(NEEDS) <= names


def test_served_commands_end_cleanly_and_print_nothing_more(world: World) -> None:
    from .conftest import stop

    code = stop(world.garden)
    assert code == 0 and world.garden.stdout_rest == []  # the summary went to stderr


def test_devnet_up_in_the_foreground_prints_one_ready_document(tmp_path: Path) -> None:
    from solders.keypair import Keypair

    from .conftest import serve, stop

    home = tmp_path / "devnet"
    fast = ["--solana-port", "0", "--base-port", "0", "--slot-time", "0.05", "--confirmed-after", "1",
            "--finalized-after", "4", "--block-time", "0.2"]
    up = serve(["devnet", "up", "--home", str(home), *fast])
    try:
        check(up.ready, "devnet_up")
        assert up.ready["state"]["pid"] == up.proc.pid and up.ready["detached"] is False
        for args, definition in ((["devnet", "status"], "devnet_status"),
                                 (["fund", str(Keypair().pubkey()), "--sol", "1"], "fund")):
            res = runner.invoke(app, [*args, "--home", str(home), "--json"])
            assert res.exit_code == 0, res.output
            check(json.loads(res.stdout), definition)
        res = runner.invoke(app, ["devnet", "down", "--home", str(home), "--json"])
        assert res.exit_code == 0 and json.loads(res.stdout)["pid"] == up.proc.pid
    finally:
        code = stop(up)
    assert code == 0 and up.stdout_rest == []  # its log and "stopped" went to stderr
