"""`envelopay status FLOW` against a worker served by `serve_worker` (embedded garden) in a
thread (SPEC.md "Status while working"): the worker is asked only once it said it speaks
the extension, and answers with the job's state."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._served import served
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.node.agent_node import open_store
from envelopay.node.serve import serve_worker

from .test_cli_client import CLIENT, WORKER, _agents

runner = CliRunner()


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    wdir, cdir = _agents(tmp_path)
    cfg = load_config(wdir / "envelopay.toml")
    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        yield wdir / "envelopay.toml", cdir / "envelopay.toml"


def _order(ccfg: Path, task: str) -> str:
    res = runner.invoke(app, ["order", WORKER, "--task", task, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    flow = re.search(r"flow (flow_\w+)", res.output)
    assert flow is not None
    return flow.group(1)


def _status(ccfg: Path, flow: str, *extra: str) -> tuple[int, dict[str, object]]:
    res = runner.invoke(app, ["status", flow, "-c", str(ccfg), "--json", "--timeout", "60", *extra])
    return res.exit_code, json.loads(res.stdout)


def test_a_worker_that_never_said_so_is_not_asked(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    flow = _order(ccfg, '{"name": "word_count", "text": "a b", "rail": "base-local/USDC"}')
    code, doc = _status(ccfg, flow)
    assert code == 0 and doc["asked"] is False and "has not said" in str(doc["reason"])
    assert doc["job"] is None and doc["flow"] == {"id": flow, "state": "invoiced"}
    # Nothing was sent: the client's log of the flow holds its ORDER and the INVOICE only.
    store = open_store(load_config(ccfg).agent.ledger, ccfg.parent)
    try:
        assert [e.type for e in store.flow_log(flow)] == ["order", "invoice"]
    finally:
        store.close()


def test_after_methods_named_it_the_worker_answers_unpaid_then_done(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    res = runner.invoke(app, ["which", WORKER, "-c", str(ccfg), "--wait", "--timeout", "60", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["answer"]["extensions"] == ["status"]  # our WHICH named it

    priced = _order(ccfg, '{"name": "word_count", "text": "a b", "rail": "base-local/USDC"}')
    code, doc = _status(ccfg, priced)
    assert code == 0 and doc["asked"] is True, doc
    assert doc["job"] == {"state": "unpaid", "at": doc["job"]["at"], "told": True}  # type: ignore[index]
    assert doc["answer"]["type"] == "wait" and doc["answer"]["order_ref"]  # type: ignore[index]

    free = _order(ccfg, '{"name": "digest", "text": "abc"}')
    res = runner.invoke(app, ["status", free, "-c", str(ccfg), "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert f"flow {free} with {WORKER}: fulfilled" in res.output
    assert re.search(r"the worker says: done \(.*done 20\d\d-", res.output), res.output

    # The flow's thread lists the question and its answer beside the nine.
    res = runner.invoke(app, ["show", priced, "-c", str(ccfg)])
    assert res.exit_code == 0 and "WHATSUP" in res.output and "WAIT" in res.output, res.output
    res = runner.invoke(app, ["show", priced, "-c", str(ccfg), "--json"])
    assert [m["type"] for m in json.loads(res.stdout)["messages"]][-2:] == ["whatsup", "wait"]

    # --no-ask: the ledger's view, the WAIT told last time.
    code, doc = _status(ccfg, priced, "--no-ask")
    assert code == 0 and doc["asked"] is False and doc["reason"] == "--no-ask"
    assert doc["job"]["state"] == "unpaid" and doc["job"]["told"] is False  # type: ignore[index]


def test_no_such_order_flow_is_exit_2(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    res = runner.invoke(app, ["status", "flow_nope", "-c", str(ccfg), "--json"])
    assert res.exit_code == 2 and "no order of ours" in res.stdout
    res = runner.invoke(app, ["status", "flow_nope", "-c", str(ccfg), "--timeout", "-1"])
    assert res.exit_code == 2 and "--timeout" in res.output


def test_a_client_that_speaks_no_extension_never_asks(pair: tuple[Path, Path]) -> None:
    _, ccfg = pair
    text = ccfg.read_text()
    ccfg.write_text(text.replace("[agent]\n", "[agent]\nextensions = []\n", 1))
    res = runner.invoke(app, ["which", WORKER, "-c", str(ccfg), "--wait", "--timeout", "60", "--json"])
    assert res.exit_code == 0, res.output
    assert "extensions" not in json.loads(res.stdout)["answer"]  # a strict asker: nothing new
    flow = _order(ccfg, '{"name": "digest", "text": "abc"}')
    code, doc = _status(ccfg, flow)
    assert code == 0 and doc["asked"] is False and "does not speak" in str(doc["reason"])
    assert CLIENT  # the client of test_cli_client's world
