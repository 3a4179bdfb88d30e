"""The client CLI against a worker served by `serve_worker` (embedded garden) in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests._served import dkim_record, served, wire_garden
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.node.agent_node import open_store
from envelopay.node.init import admit_agent, init_agent
from envelopay.node.serve import serve_worker

runner = CliRunner()
WORKER = "worker@garden.local"
KV = "kv-worker@garden.local"  # the worker's own responder, as `init` declares it
CLIENT = "client@garden.local"


def _agents(tmp_path: Path) -> tuple[Path, Path]:
    """A worker and a client (their folders) made by `envelopay init`, wired to one
    embedded garden whose socket path is short enough for AF_UNIX."""
    wdir, cdir = tmp_path / "worker", tmp_path / "client"
    init_agent(wdir, address=WORKER)
    init_agent(cdir, address=CLIENT)
    sock = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp")) / "lmtp.sock"
    wire_garden(wdir / "envelopay.toml", tmp_path / "garden", sock, dkim_record(cdir, "client"), [CLIENT])
    wire_garden(cdir / "envelopay.toml", tmp_path / "garden", sock, dkim_record(wdir, "worker"), [])
    admit_agent(wdir / "garden-accounts.json", cdir / "envelopay.toml")  # the garden authenticates
    return wdir, cdir


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    wdir, cdir = _agents(tmp_path)
    cfg = load_config(wdir / "envelopay.toml")

    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        yield wdir / "envelopay.toml", cdir / "envelopay.toml"


def test_which_order_free_and_priced_then_flows_and_show(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    res = runner.invoke(app, ["which", WORKER, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received METHODS" in res.output and '"price": "250000"' in res.output

    task = '{"name": "digest", "text": "abc"}'
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received FULFILL" in res.output and "ba7816bf" in res.output

    task = '{"name": "word_count", "text": "a b", "rail": "base-local/USDC"}'
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received INVOICE" in res.output and '"chain": "base-local"' in res.output
    # The summary reads the amount in the asset's units (issue 30); the JSON keeps the units.
    assert "the INVOICE asks 0.25 USDC (250000 units) on base-local" in res.output
    assert '"note": "word_count: 0.25 USDC on base-local"' in res.output
    flow = re.search(r"flow (flow_\w+)", res.output)
    assert flow is not None

    res = runner.invoke(app, ["flows", "-c", str(ccfg)])
    assert res.exit_code == 0 and "invoiced" in res.output
    res = runner.invoke(app, ["show", flow.group(1), "-c", str(ccfg)])
    assert res.exit_code == 0, res.output
    assert "ORDER" in res.output and "INVOICE" in res.output
    assert runner.invoke(app, ["show", "flow_nope", "-c", str(ccfg)]).exit_code == 2


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["order", WORKER, "--task", "{not json"], "--task"),
        (["order", "a@b.example, c@d.example", "--task", "{}"], "ADDRESS"),
        (["pay", WORKER, "--amount", "1.5", "--token", "USDC", "--chain", "solana-local"], "--amount"),
        (["pay", WORKER, "--amount", "10", "--token", "USDC", "--chain", "solana-local"], "--wallet"),
        (["pay", WORKER, "--amount", "10", "--token", "USDC", "--chain", "doge", "--wallet", "x"], "--chain"),
        (["oops", WORKER, "--code", "", "--note", "x", "--flow", "flow_x"], "--code"),
        (["oops", WORKER, "--code", "notacode", "--note", "x", "--flow", "flow_x"], "--code"),
        (["oops", WORKER, "--code", "tx_not_found", "--note", "x"], "--flow"),
        (["oops", WORKER, "--code", "tx_not_found", "--note", "x", "--ref", "pay_nope"], "--ref"),
        (["order", WORKER, "--task", "{}", "--wait", "--timeout", "-1"], "--timeout"),
        (["pay", WORKER, "--token", "USDC", "--chain", "solana-local", "--wallet", "x"], "--amount"),
        (["pay", WORKER, "--invoice", "inv_nope"], "--invoice"),
        (["pay", WORKER, "--amount", "10", "--token", "DOGE", "--chain", "solana-local",
          "--wallet", "11111111111111111111111111111111"], "--token: unknown token"),
        (["invoice", WORKER, "--amount", "5", "--token", "DAI", "--chain", "ethereum"], "--wallet"),
        (["fulfill", WORKER, "--order", "ord_nope", "--result", "{}"], "--order: no message 'ord_nope'"),
    ],
)
def test_bad_input_names_the_field_and_sends_nothing(
    pair: tuple[Path, Path], args: list[str], field: str
) -> None:
    _, ccfg = pair
    res = runner.invoke(app, [*args, "-c", str(ccfg)])
    assert res.exit_code == 2, res.output
    assert field in res.output
    cfg = load_config(ccfg)
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        assert store.list_flows(CLIENT) == []
        assert store.outbox_pending(datetime.now(UTC)) == []
    finally:
        store.close()


def test_fulfill_joins_the_flow_of_its_order(pair: tuple[Path, Path]) -> None:
    # README's `envelopay fulfill ADDRESS --order ID --result ...` has no --flow: the ORDER
    # it names must pick the flow (it used to fail with "give flow_id or in_reply_to").
    _, ccfg = pair
    task = '{"name": "word_count", "text": "a b"}'
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    order = re.search(r'"order_ref": "(ord_\w+)"', res.output)
    assert order is not None
    args = ["fulfill", WORKER, "--order", order.group(1), "--result", "{}"]
    res = runner.invoke(app, [*args, "-c", str(ccfg)])
    # The flow was found (the refusal is the flow table's, for the payer side of an invoiced flow).
    assert res.exit_code == 2, res.output
    assert "state invoiced" in res.output and "flow_id" not in res.output


def test_pay_without_funds_fails_before_sending(pair: tuple[Path, Path]) -> None:
    """insufficient_funds is the environment's fault: exit 3, not 2 (issue 15)."""
    _, ccfg = pair
    res = runner.invoke(app, ["pay", WORKER, "--amount", "10", "--token", "USDC", "--chain", "solana-local",
                              "--wallet", "11111111111111111111111111111111", "-c", str(ccfg), "--json"])
    assert res.exit_code == 3, res.output
    doc = json.loads(res.stdout)
    assert doc["exit"] == 3 and "nothing was sent" in doc["detail"]


@pytest.fixture
def pair_for_the_corpus(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """As `pair`, with no limit on the worker's automatic answers to one peer: the live
    corpus draws some 345 answers from the client, above the default `[answers] per_peer`
    (300 an hour), past which a worker rightly holds its answers (SPEC.md "Live conformance")."""
    wdir, cdir = _agents(tmp_path)
    with (wdir / "envelopay.toml").open("a", encoding="utf-8") as f:
        f.write("\n[answers]\nper_peer = 0\n")
    cfg = load_config(wdir / "envelopay.toml")
    assert cfg.answers.per_peer == 0
    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        yield wdir / "envelopay.toml", cdir / "envelopay.toml"


def test_conformance_against_our_own_worker(pair_for_the_corpus: tuple[Path, Path]) -> None:
    _, ccfg = pair_for_the_corpus
    res = runner.invoke(app, ["conformance", "--target", WORKER, "--config", str(ccfg)])
    last = res.output.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ passed, 0 failed", last), res.output[-3000:]
    assert int(last.split()[0]) >= 250
    assert res.exit_code == 0


def test_conformance_target_must_be_one_address(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    res = runner.invoke(app, ["conformance", "--target", "a@b.example, c@d.example", "--config", str(ccfg)])
    assert res.exit_code == 2 and "--target" in res.output


@pytest.fixture
def pair_rpc(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """As `pair`, with both agents on one Base chain reached over JSON-RPC (a dev node
    on loopback serving a local eth-tester chain), so the CLI can really pay."""
    with _pair_on_a_base_node(tmp_path, lambda handle: handle) as (configs, _):
        yield configs


@contextlib.contextmanager
def _pair_on_a_base_node(
    tmp_path: Path, wrap: Callable[[Any], Any], client_rail: str = ""
) -> Iterator[tuple[tuple[Path, Path], Any]]:
    """The two agents on one eth-tester chain served over JSON-RPC by a handler `wrap`
    wraps; `client_rail` adds options to the client's [rails.base]. Yields the two config
    paths and the chain."""
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay.node.keys import evm_address
    from envelopay_base.devnode import base_rpc_handler
    from envelopay_base.local import LocalChain

    wdir, cdir = _agents(tmp_path)
    chain = LocalChain()
    chain.fund(evm_address(cdir / "keys" / "base.key"), eth=10**18, usdc=5_000_000)
    chain.fund(evm_address(wdir / "keys" / "base.key"), eth=10**18)

    async def serve(stop: asyncio.Event, ready: Callable[[object], None]) -> None:
        async with JsonRpcServer(wrap(base_rpc_handler(chain))) as node:
            url = node.url
            for d in (wdir, cdir):
                cfg_path = d / "envelopay.toml"
                extra = f"\n{client_rail}" if d == cdir and client_rail else ""
                cfg_path.write_text(cfg_path.read_text().replace(
                    '[rails.base]\nbackend = "local"',
                    f'[rails.base]\nbackend = "rpc"\nrpc_url = "{url}"\nnetwork = "local"\n'
                    f"chain_id = {chain.chain_id}{extra}"))
            cfg = load_config(wdir / "envelopay.toml")
            await serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop, ready=ready)

    with served(serve):
        yield (wdir / "envelopay.toml", cdir / "envelopay.toml"), chain


def test_order_then_pay_the_invoice_from_the_cli(pair_rpc: tuple[Path, Path]) -> None:
    _, ccfg = pair_rpc
    task = '{"name": "word_count", "text": "paid from the command line", "rail": "base-local/USDC"}'
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    inv = re.search(r'"id": "(inv_\w+)"', res.output)
    flow = re.search(r"flow (flow_\w+)", res.output)
    assert inv is not None and flow is not None, res.output
    res = runner.invoke(app, ["pay", WORKER, "--amount", "250000", "--token", "USDC", "--chain", "base-local",
                              "--invoice", inv.group(1), "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received FULFILL" in res.output and '"words": 5' in res.output
    res = runner.invoke(app, ["show", flow.group(1), "-c", str(ccfg)])
    assert res.exit_code == 0 and "fulfilled" in res.output


def test_call_the_kv_responder_from_the_cli(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    res = runner.invoke(app, ["call", "kv-worker@garden.local", "--request", '{"key": "spec.version"}',
                              "-c", str(ccfg), "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert '"status": "ok"' in res.output and '"value": "0.1.0"' in res.output
    res = runner.invoke(app, ["call", KV, "--request", '{"key": "nope"}', "-c", str(ccfg)])
    assert res.exit_code == 1 and '"code": "not_found"' in res.output
    res = runner.invoke(app, ["call", KV, "--request", "[1]", "-c", str(ccfg)])
    assert res.exit_code == 2 and "--request" in res.output


SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cli-output.schema.json").read_text())


def _doc(args: list[str], code: int) -> dict[str, object]:
    """Run one command with --json: exactly one JSON document on stdout, valid against the schema."""
    import jsonschema

    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == code, (args, res.stdout, res.stderr)
    doc = json.loads(res.stdout)  # one document, nothing else on stdout
    jsonschema.validate(doc, SCHEMA)
    assert doc["exit"] == code
    return doc  # type: ignore[no-any-return]


def test_every_command_answers_one_json_document_with_its_exit_code(pair: tuple[Path, Path],
                                                                     tmp_path: Path) -> None:
    _, ccfg = pair
    c = ["-c", str(ccfg)]
    res = runner.invoke(app, ["which", WORKER, *c, "--wait", "--timeout", "60"])
    assert res.exit_code == 0 and res.output.count("sent WHICH") == 1, res.output  # not twice
    doc = _doc(["which", WORKER, *c, "--wait", "--timeout", "60"], 0)
    assert doc["answer"]["type"] == "methods" and doc["oops"] is None  # type: ignore[index]
    # An OOPS answer exits 1 and carries its code (it exited 0 before).
    doc = _doc(["order", WORKER, "--task", '{"name": "nope"}', *c, "--wait", "--timeout", "60"], 1)
    assert doc["oops"]["code"] == "unknown_task"  # type: ignore[index]
    doc = _doc(["order", WORKER, "--task", '{"name": "digest", "text": 1}', *c, "--wait"], 1)
    assert doc["oops"]["code"] == "invalid_field"  # type: ignore[index]
    task = '{"name": "word_count", "text": "a b", "rail": "solana-local/USDC"}'
    doc = _doc(["order", WORKER, "--task", task, *c, "--wait", "--timeout", "60"], 0)
    inv = doc["answer"]["id"]  # type: ignore[index]
    flow = doc["flow"]["id"]  # type: ignore[index]
    assert doc["flow"]["state"] == "invoiced"  # type: ignore[index]
    # pay --invoice: a flag that contradicts the INVOICE is refused before anything moves, named.
    err = _doc(["pay", WORKER, "--invoice", inv, "--chain", "base-local", *c], 2)
    assert err["field"] == "--chain" and "solana-local" in str(err["detail"])
    err = _doc(["pay", WORKER, "--invoice", inv, "--wallet", "11111111111111111111111111111111", *c], 2)
    assert err["field"] == "--wallet"
    err = _doc(["pay", WORKER, "--invoice", inv, "--amount", "1", *c], 2)
    assert err["field"] == "--amount"
    # offer toward a worker without [[exchange]]: it asks first and pays nothing.
    err = _doc(["offer", WORKER, "--give-amount", "1000000", "--give-token", "USDC", "--give-chain",
                "solana-local", "--give-to", "11111111111111111111111111111111", "--want-amount", "1",
                "--want-token", "USDC", "--want-chain", "base-local", *c, "--timeout", "60"], 1)
    assert err["error"] == "refused" and "nothing was paid" in str(err["detail"])
    flows = _doc(["flows", *c], 0)
    assert flow in {f["id"] for f in flows["flows"]}  # type: ignore[attr-defined]
    assert not any(f["kind"] == "exchange" for f in flows["flows"])  # type: ignore[attr-defined]
    shown = _doc(["show", flow, *c], 0)
    assert [m["type"] for m in shown["messages"]][:2] == ["order", "invoice"]  # type: ignore[attr-defined]
    doc = _doc(["oops", WORKER, "--code", "tx_not_found", "--note", "never mind", "--ref", inv, *c], 0)
    assert doc["flow"]["id"] == flow  # type: ignore[index]
    _doc(["invoice", WORKER, "--amount", "5", "--token", "USDC", "--chain", "solana-local", *c], 0)
    _doc(["fulfill", WORKER, "--order", "ord_x", "--result", '{"a": 1}', "--flow", "flow_new", *c], 2)
    assert _doc(["outbox", *c], 0)["queued"] == []
    _doc(["drain", *c], 0)
    _doc(["show", "flow_nope", *c], 2)
    _doc(["order", WORKER, "--task", "{}", "--wait", "--timeout", "-1", *c], 2)
    _doc(["init", "--dir", str(tmp_path / "new")], 0)
    _doc(["call", "kv-worker@garden.local", "--request", '{"key": "spec.version"}', *c], 0)
    res = runner.invoke(app, ["order", WORKER, "--task", "[1]", *c])
    assert res.exit_code == 2 and "--task" in res.output and "Input should" not in res.output, res.output


def test_a_permanent_550_is_reported_as_failed_not_queued(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    doc = _doc(["which", "nobody@garden.local", "-c", str(ccfg)], 1)
    assert doc["delivery"] == "failed" and doc["queued"] is False
    assert "550" in str(doc["delivery_error"])
    res = runner.invoke(app, ["which", "nobody@garden.local", "-c", str(ccfg)])
    assert res.exit_code == 1 and "refused for good" in res.output and "queued" not in res.output


def test_an_oops_after_pay_leaves_the_flow_open_for_an_honest_retry(pair_rpc: tuple[Path, Path]) -> None:
    """Issue 15: PAY to the wrong wallet → OOPS recipient_mismatch → exit 1, the client's flow
    back to `invoiced` with the payment recorded; the honest PAY is then accepted."""
    _, ccfg = pair_rpc
    c = ["-c", str(ccfg)]
    task = '{"name": "word_count", "text": "one two three", "rail": "base-local/USDC"}'
    doc = _doc(["order", WORKER, "--task", task, *c, "--wait", "--timeout", "60"], 0)
    inv, flow = doc["answer"]["id"], doc["flow"]["id"]  # type: ignore[index]
    wrong = "0x000000000000000000000000000000000000dEaD"
    doc = first = _doc(["pay", WORKER, "--invoice", inv, "--wallet", wrong, "--override", *c, "--wait",
                        "--timeout", "60"], 1)
    assert doc["overrides"] == ["wallet"] and doc["paid"]["to"] == wrong  # type: ignore[index]
    assert doc["oops"]["code"] == "recipient_mismatch"  # type: ignore[index]
    assert doc["flow"] == {"id": flow, "state": "invoiced"}
    doc = _doc(["pay", WORKER, "--invoice", inv, *c, "--wait", "--timeout", "60"], 0)
    assert doc["answer"]["type"] == "fulfill" and doc["flow"]["state"] == "fulfilled"  # type: ignore[index]
    shown = _doc(["show", flow, *c], 0)
    statuses = [p["status"] for p in shown["payments"]]  # type: ignore[attr-defined]
    assert statuses == ["refused (recipient_mismatch)", "paid"]
    refused = shown["payments"][0]  # type: ignore[index]
    assert (refused["id"], refused["amount"], refused["proof"]) == (first["sent"]["id"], "250000",  # type: ignore[index]
                                                                   first["paid"]["proof"])  # type: ignore[index]
    res = runner.invoke(app, ["show", flow, *c])
    assert "payments in this flow" in res.output and "refused" in res.output


def test_a_payment_that_may_still_land_is_not_reported_failed(tmp_path: Path) -> None:
    """The node takes the transaction but never shows its receipt within the rail's wait:
    `pay` must not say the payment failed (the person would pay again). It exits 3, says
    the transaction may still land and not to pay again, names it, and mails no PAY; the
    money moved once."""
    hidden = {"receipts": True}

    def no_receipts(handle: Any) -> Any:
        def answer(method: str, params: list[Any]) -> Any:
            if hidden["receipts"] and method == "eth_getTransactionReceipt":
                return None
            return handle(method, params)
        return answer

    with _pair_on_a_base_node(tmp_path, no_receipts, "confirm_timeout = 0.3\npoll_interval = 0.05") as (
            (_, ccfg), chain):
        task = '{"name": "word_count", "text": "a slow chain", "rail": "base-local/USDC"}'
        res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait",
                                  "--timeout", "60"])
        assert res.exit_code == 0, res.output
        inv = re.search(r'"id": "(inv_\w+)"', res.output)
        assert inv is not None, res.output
        wallet = re.search(r'"wallet": "(0x[0-9a-fA-F]{40})"', res.output)
        assert wallet is not None, res.output
        res = runner.invoke(app, ["pay", WORKER, "--amount", "250000", "--token", "USDC",
                                  "--chain", "base-local", "--invoice", inv.group(1), "-c", str(ccfg),
                                  "--json"])
        assert res.exit_code == 3, res.output
        detail = json.loads(res.stdout)["detail"]
        assert "may still land" in detail and "do not pay again" in detail, detail
        assert "base-local failed" not in detail and "sent PAY" not in res.output, res.output
        tx = re.search(r"transaction (0x[0-9a-f]{64})", detail)
        assert tx is not None, detail
        assert chain.read(tx.group(1)).receipt is not None
        assert chain.token_balance(wallet.group(1)) == 250_000  # paid, once
        # The chain shows it now: its proof goes with the PAY, and nothing is paid again.
        hidden["receipts"] = False
        for bad in ('["not", "an object"]', '{"tx": "not-a-hash"}'):
            res = runner.invoke(app, ["pay", WORKER, "--amount", "250000", "--token", "USDC",
                                      "--chain", "base-local", "--invoice", inv.group(1), "--proof", bad,
                                      "-c", str(ccfg)])
            assert res.exit_code == 2 and "--proof" in res.output, res.output
        proof = json.dumps({"tx": tx.group(1)})
        res = runner.invoke(app, ["pay", WORKER, "--amount", "250000", "--token", "USDC",
                                  "--chain", "base-local", "--invoice", inv.group(1), "--proof", proof,
                                  "-c", str(ccfg), "--wait", "--timeout", "60"])
        assert res.exit_code == 0, res.output
        assert "received FULFILL" in res.output and '"words": 3' in res.output, res.output
        assert chain.token_balance(wallet.group(1)) == 250_000  # still once
