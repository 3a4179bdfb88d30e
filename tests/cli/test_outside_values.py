"""Issue 29, items 11-12: every client command that writes, given one value no mail or
ledger row can hold (a lone surrogate, NUL, JSON nested 200,000 deep, an integer past
int()'s digit limit) in one option at a time, answers exit 2 naming that option — and
writes nothing: no ledger row, no outbox row, no mail in the garden.

Before: a lone surrogate in --task exited 1 with a compose error after the flow and its
outbox row were written; a deep --task or --request was a RecursionError traceback."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.node.agent_node import open_store

from .conftest import WORKER, World

runner = CliRunner()
SUR = "\udcff"  # what argv bytes that are not UTF-8 decode to
BAD_JSON = {
    "surrogate": '{"name": "digest", "text": "\\ud800"}',
    "NUL": '{"name": "digest", "text": "a\\u0000b"}',
    "200,000 deep": "[" * 200_000 + "]" * 200_000,
    "5,000 digits": '{"name": "digest", "n": ' + "9" * 5_000 + "}",
}
TABLES = ("ep_flows", "ep_log", "ep_outbox", "ep_flow_refs", "ep_calls")


def _commands(sol: str) -> dict[str, tuple[list[str], dict[str, str], tuple[str, ...]]]:
    """command → (argv with good values, {option: its good value}, the JSON options)."""
    return {
        "which": (["which", WORKER], {"--task": '{"name": "digest"}', "--note": "hi", "--id": "wch_1"},
                  ("--task",)),
        "order": (["order", WORKER], {"--task": '{"name": "digest", "text": "a"}', "--note": "hi",
                                      "--id": "ord_1", "--flow": "flow_x"}, ("--task",)),
        "order --pay": (["order", WORKER, "--pay"], {"--task": '{"name": "digest", "text": "a"}',
                                                     "--max-amount": "10"}, ("--task",)),
        "pay": (["pay", WORKER], {"--amount": "5", "--token": "USDC", "--chain": "solana-local",
                                  "--wallet": sol, "--note": "hi", "--id": "pay_1"}, ()),
        "pay --invoice": (["pay", WORKER], {"--invoice": "inv_1"}, ()),
        "invoice": (["invoice", WORKER], {"--amount": "5", "--token": "USDC", "--chain": "solana-local",
                                          "--wallet": sol, "--order": "ord_1", "--note": "hi",
                                          "--due": "2030-01-01T00:00:00Z", "--id": "inv_1"}, ()),
        "offer": (["offer", WORKER, "--no-check"], {
            "--give-amount": "5", "--give-token": "USDC", "--give-chain": "solana-local", "--give-to": sol,
            "--want-amount": "5", "--want-token": "USDC", "--want-chain": "base-local", "--note": "hi",
            "--id": "ofr_1"}, ()),
        "accept": (["accept", WORKER], {"--offer": "ofr_1", "--amount": "5", "--token": "USDC",
                                        "--chain": "solana-local", "--wallet": sol, "--note": "hi"}, ()),
        "fulfill": (["fulfill", WORKER], {"--order": "ord_1", "--result": '{"ok": true}', "--note": "hi",
                                          "--flow": "flow_x"}, ("--result",)),
        "oops": (["oops", WORKER], {"--code": "tx_not_found", "--note": "hi", "--ref": "pay_1",
                                    "--flow": "flow_x"}, ()),
        "call": (["call", "kv@garden.local"], {"--request": '{"key": "spec.version"}'}, ("--request",)),
    }


def _cases() -> list[tuple[str, str, str]]:
    out = []
    for name, (_, opts, json_opts) in _commands("x").items():
        out += [(name, "ADDRESS", "surrogate")]
        out += [(name, opt, "surrogate") for opt in opts]
        out += [(name, opt, kind) for opt in json_opts for kind in BAD_JSON]
    return out


def _written(world: World) -> tuple[dict[str, int], int]:
    """The client's ledger rows by table, and the files in the garden (every mailbox)."""
    cfg = load_config(world.ccfg)
    open_store(cfg.agent.ledger, world.ccfg.parent).close()  # the tables exist from the first command on
    with sqlite3.connect(world.ccfg.parent / cfg.agent.ledger) as db:
        rows = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
    mail = sum(1 for p in (world.tmp / "garden").rglob("*")
               if p.is_file() and p.parent.name in ("new", "cur"))
    return rows, mail


@pytest.mark.parametrize(("command", "option", "kind"), _cases())
def test_one_bad_value_exits_2_naming_it_and_writes_nothing(
    world: World, command: str, option: str, kind: str
) -> None:
    sol = next(a.wallet for a in load_config(world.wcfg).accept if a.chain == "solana-local")
    argv, opts, _ = _commands(sol)[command]
    bad = SUR if kind == "surrogate" and option not in _commands(sol)[command][2] else BAD_JSON[kind]
    args = list(argv)
    if option == "ADDRESS":
        args[1] = f"x{SUR}@garden.local"
    for opt, good in opts.items():
        args += [opt, bad if opt == option else good]
    before = _written(world)
    res = runner.invoke(app, [*args, "-c", str(world.ccfg), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    doc: dict[str, Any] = json.loads(res.stdout)
    assert (res.exit_code, doc["exit"], doc["field"]) == (2, 2, option), (args[:3], doc)
    assert _written(world) == before


@pytest.mark.parametrize(("args", "field"), [
    (["approvals", "approve", f"x{SUR}"], "SEND_ID"),
    (["agent", "kill", f"x{SUR}"], "NAME"),
    (["agent", "list", "--after", SUR], "--after"),
    (["mail", "check", "--from", SUR], "--from"),
    (["mail", "search", SUR], "QUERY"),
])
def test_operator_and_mail_commands_refuse_text_no_mail_can_hold(tmp_path: Path, args: list[str],
                                                                  field: str) -> None:
    # Operator commands used to hand it to the HTTP client (a traceback); `mail check
    # --from` to the index (UnicodeEncodeError).
    where = ["--operator-token-file", str(tmp_path / "op.token")] if args[0] in ("approvals", "agent") \
        else ["--dir", str(tmp_path)]
    res = runner.invoke(app, [*args, *where, "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["field"]) == (2, field), doc
