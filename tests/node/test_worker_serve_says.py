"""`envelopay worker serve` says what it does (issue 30, item 2), as a real process: a
line per message on stderr (text, or JSON lines), a summary at SIGINT / SIGTERM with the
money received in the asset's units, and Prometheus metrics over HTTP that moved by
exactly what was sent.

The world is the devnet's, in this process (a Solana dev node over JSON-RPC on a slot
clock the test advances, the garden on a Unix socket, configs from `init --devnet`);
the worker is `python -m envelopay.cli worker serve` in its own process, and the buyer
sends to it through the garden: WHICH, ORDER, a paid PAY, an ORDER for a task the worker
does not sell, and a plain mail that is not protocol."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.utils import make_msgid
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests._devnet import local_devnet

from envelopay.client.buyer import ClientApp, follow, pay_first
from envelopay.config import load_config
from envelopay.node.agent_node import AgentNode, build_node
from envelopay.node.init import init_agent
from envelopay.protocol.messages import Fulfill, Invoice, Methods, Oops, Order, Pay, Which

WORKER, BUYER = "worker@garden.local", "buyer@garden.local"
CONFIRMED_AFTER = 2
README = Path(__file__).resolve().parents[2] / "README.md"


def documented_worker_metrics() -> set[str]:
    section = README.read_text().split("<!-- metrics -->", 1)[1].split("<!-- /metrics -->", 1)[0]
    return set(re.findall(r"^\| `(envelopay_worker_[a-z_]+)` \|", section, re.M))


@contextlib.asynccontextmanager
async def devnet(tmp_path: Path) -> AsyncIterator[tuple[Any, dict[str, Path]]]:
    """The devnet's chain and garden in this process; the two agents' directories."""
    async with local_devnet(tmp_path, (WORKER, BUYER), (BUYER,), confirmed_after=CONFIRMED_AFTER,
                            finalized_after=4) as d:
        yield d.clock, d.dirs


class Worker:
    """`worker serve` as a process; its stderr lines collected as they come."""

    def __init__(self, proc: asyncio.subprocess.Process, ready: dict[str, Any]) -> None:
        self.proc = proc
        self.ready = ready
        self.lines: list[str] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self.lines.append(raw.decode().rstrip("\n"))

    async def until_lines(self, predicate: Any, what: str, timeout: float = 60) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self.lines):
            assert loop.time() < deadline, f"timed out waiting for {what}; stderr: {self.lines}"
            await asyncio.sleep(0.05)


async def start_worker(wdir: Path, log_format: str) -> Worker:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envelopay.cli", "worker", "serve", "-c", "envelopay.toml", "--json",
        "--metrics", "127.0.0.1:0", "--log-format", log_format,
        cwd=wdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line, f"worker serve ended before it was ready (exit {await proc.wait()})"
    return Worker(proc, json.loads(line))


async def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient() as client:
        r = await client.get(url)
    assert r.status_code == 200, r
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(r.text) for s in f.samples}


def plain_mail() -> bytes:
    """What a person writes: no protocol subject, no JSON."""
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Subject"] = BUYER, WORKER, "hello there"
    msg["Message-ID"] = make_msgid(domain="garden.local")
    msg.set_content("Do you also translate poems?")
    return msg.as_bytes()


async def trade(buyer: AgentNode, clock: Any) -> tuple[str, int]:
    """WHICH, ORDER, PAY (paid), an ORDER for a task not sold here, a plain mail; (the
    OOPS code the second ORDER got, the amount paid)."""
    which = await buyer.send(Which(id="wch_says1"), WORKER)
    assert isinstance((await follow(buyer, which, timeout=60)).message, Methods)
    task = {"name": "word_count", "text": "one two three"}
    order = await buyer.send(Order(id="ord_says1", task=task), WORKER)
    invoice = (await follow(buyer, order, timeout=60)).message
    assert isinstance(invoice, Invoice), invoice
    proof = await pay_first(buyer, chain=invoice.chain, token=invoice.token, amount=invoice.amount,
                            recipient=invoice.wallet, final_wait=0)
    for _ in range(CONFIRMED_AFTER + 1):
        clock.tick()  # confirmed before the PAY goes: no waiting on the worker's side
    pay = Pay(id="pay_says1", amount=invoice.amount, token=invoice.token, chain=invoice.chain, proof=proof,
              invoice_ref=invoice.id)
    paid = await buyer.send(pay, WORKER, flow_id=order.flow_id)
    assert isinstance((await follow(buyer, paid, timeout=60)).message, Fulfill)
    unknown = await buyer.send(Order(id="ord_says2", task={"name": "translate_poem", "text": "x"}), WORKER)
    answer = (await follow(buyer, unknown, timeout=60)).message
    assert isinstance(answer, Oops) and answer.error is not None, answer
    assert buyer.transport is not None
    await buyer.transport.send(plain_mail(), BUYER, WORKER)
    return answer.error.code, invoice.amount


@pytest.mark.parametrize(("log_format", "sig"), [("text", signal.SIGINT), ("json", signal.SIGTERM)])
async def test_worker_serve_logs_each_message_counts_them_and_sums_up(
    tmp_path: Path, log_format: str, sig: signal.Signals
) -> None:
    async with devnet(tmp_path) as (clock, dirs):
        worker = await start_worker(dirs[WORKER], log_format)
        try:
            url = worker.ready["metrics"]
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", url), worker.ready
            before = await scrape(url)
            cfg = load_config(dirs[BUYER] / "envelopay.toml")
            # The buyer does not wait for confirmation: the test's slot clock gives it.
            solana = cfg.rails["solana"] | {"confirm_timeout": 0}
            cfg = cfg.model_copy(update={"rails": {**cfg.rails, "solana": solana}})
            buyer = build_node(cfg, app=ClientApp({(a.chain, a.token): a.wallet for a in cfg.accept}))
            try:
                oops, amount = await trade(buyer, clock)
            finally:
                await buyer.close()
                buyer.store.close()
            await worker.until_lines(lambda lines: sum(_is_message(x, log_format) for x in lines) >= 5,
                                     "five message lines")
            after = await scrape(url)
            worker.proc.send_signal(sig)
            assert await asyncio.wait_for(worker.proc.wait(), 60) == 0
            await worker.reader
        finally:
            if worker.proc.returncode is None:
                worker.proc.kill()
                await worker.proc.wait()

    messages = [x for x in worker.lines if _is_message(x, log_format)]
    assert len(messages) == 5, worker.lines
    if log_format == "text":
        _check_text(worker.lines, messages, oops)
    else:
        _check_json(worker.lines, messages, oops, amount)
    assert worker.lines[-1] == f"{WORKER} stopped"
    _check_metrics(before, after, oops, amount)


def _is_message(line: str, log_format: str) -> bool:
    if log_format == "json":
        return line.startswith("{") and json.loads(line).get("event") == "message"
    return " type=" in line and " outcome=" in line


def _check_text(lines: list[str], messages: list[str], oops: str) -> None:
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    flow = r"flow=[\w-]+"
    expected = [
        rf"{stamp} type=WHICH from={BUYER} {flow} outcome=processed ms=\d+\.\d",
        rf"{stamp} type=ORDER from={BUYER} {flow} outcome=processed ms=\d+\.\d",
        rf'{stamp} type=PAY from={BUYER} {flow} outcome=processed received="0\.25 USDC on solana-local'
        rf' \(250000 units\)" ms=\d+\.\d',
        # A step that answers OOPS is processed (the flow moved to its failed state).
        rf"{stamp} type=ORDER from={BUYER} {flow} outcome=processed oops={oops} ms=\d+\.\d",
        rf"{stamp} type=- from={BUYER} flow=- outcome=ignored ms=\d+\.\d",
    ]
    for line, pattern in zip(messages, expected, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    summary = lines[lines.index(next(x for x in lines if x.startswith("summary: "))):]
    assert re.fullmatch(r"summary: 5 message\(s\) in [\d.]+ s: 1 ignored, 4 processed", summary[0])
    assert summary[1:] == [f"  oops: {oops} 1", "  received: 0.25 USDC on solana-local (250000 units)",
                           f"{WORKER} stopped"]


def _check_json(lines: list[str], messages: list[str], oops: str, amount: int) -> None:
    docs = [json.loads(x) for x in messages]
    assert [(d["type"], d["outcome"], d["oops"]) for d in docs] == [
        ("WHICH", "processed", None), ("ORDER", "processed", None), ("PAY", "processed", None),
        ("ORDER", "processed", oops), (None, "ignored", None)]
    assert all(d["from"] == BUYER and isinstance(d["ms"], float) for d in docs)
    assert docs[2]["received"] == {"chain": "solana-local", "token": "USDC", "amount": str(amount),
                                   "decimals": 6, "human": "0.25"}
    assert docs[1]["flow"] == docs[2]["flow"]  # the ORDER and its PAY
    assert len({d["flow"] for d in docs[:4]}) == 3 and docs[4]["flow"] is None
    summary = json.loads(next(x for x in lines if x.startswith('{"event":"summary"')))
    assert summary["messages"] == 5
    assert summary["outcomes"] == {"ignored": 1, "processed": 4}
    assert summary["oops"] == {oops: 1}
    assert summary["received"] == [docs[2]["received"]]


def _check_metrics(before: dict[Any, float], after: dict[Any, float], oops: str, amount: int) -> None:
    def moved(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    names = {re.sub(r"_(bucket|count|sum|created)$", "", n) for n, _ in after}
    assert documented_worker_metrics() <= names, documented_worker_metrics() - names
    assert len(documented_worker_metrics()) == 10
    total = "envelopay_worker_messages_total"
    assert moved(total, type="which", outcome="processed") == 1
    assert moved(total, type="order", outcome="processed") == 2
    assert moved(total, type="pay", outcome="processed") == 1
    assert moved(total, type="none", outcome="ignored") == 1
    assert sum(v for (n, _), v in after.items() if n == total) == 5
    assert moved("envelopay_worker_oops_total", code=oops) == 1
    received = moved("envelopay_worker_received_units_total", chain="solana-local", token="USDC")
    assert received == amount == 250000
    assert moved("envelopay_worker_handling_seconds_count") == 5
    assert moved("envelopay_worker_dkim_verification_seconds_count") == 5
    # The rail was asked once, for the one PAY.
    assert moved("envelopay_worker_proof_verification_seconds_count", chain="solana-local") == 1
    assert before[("envelopay_worker_outbox_pending", ())] == 0


@pytest.mark.parametrize(("argv", "says"), [
    (["--metrics", "99999"], "--metrics '99999': PORT or HOST:PORT"),
    (["--metrics", "host:"], "--metrics 'host:'"),
    (["--log-format", "xml"], "--log-format 'xml': text or json"),
])
def test_bad_options_are_usage_errors_before_anything_starts(
    tmp_path: Path, argv: list[str], says: str
) -> None:
    init_agent(tmp_path, address=WORKER)
    done = serve_once(tmp_path, argv)
    assert done.returncode == 2, done
    assert says in done.stderr and "serving" not in done.stderr


def serve_once(wdir: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """`worker serve --garden ARGV`, expected to end by itself."""
    return subprocess.run([sys.executable, "-m", "envelopay.cli", "worker", "serve", "-c", "envelopay.toml",
                           "--garden", *argv], cwd=wdir, capture_output=True, text=True, timeout=120)


def test_a_metrics_port_in_use_is_the_environment(tmp_path: Path) -> None:
    init_agent(tmp_path, address=WORKER)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = serve_once(tmp_path, ["--metrics", str(taken.getsockname()[1])])
    assert done.returncode == 3, done
    assert "cannot listen for --metrics" in done.stderr
