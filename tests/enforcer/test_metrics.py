"""GET /metrics on the enforcer (issue 30, item 2): every family README documents is
scraped over HTTP, on both stores, and moves by exactly what was done — sends by type
and disposition, refusals by code, approvals pending, payment intents by state, and each
agent's mail and spend headroom for this hour and today."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.metrics import EnforcerMetrics
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.policy import SpendLimit

from .conftest import Sink
from .paykit import CHAIN, USDC, Kit, make_kit, pay_req, payee_wallet
from .test_delivery import WHICH

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

README = Path(__file__).resolve().parents[2] / "README.md"


def documented(prefix: str) -> set[str]:
    """The metric names of README's metrics table that start with `prefix`."""
    section = README.read_text().split("<!-- metrics -->", 1)[1].split("<!-- /metrics -->", 1)[0]
    names = set(re.findall(r"^\| `(envelopay_[a-z_]+)` \|", section, re.M))
    return {n for n in names if n.startswith(prefix)}


def families(samples: Samples) -> set[str]:
    """Scraped sample names as README writes them: counters with _total, histograms bare."""
    out = set()
    for name, _ in samples:
        out.add(re.sub(r"_(bucket|count|sum|created)$", "", name))
    return out


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient() as client:
        r = await client.get(f"{url}/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version="), r
    out: Samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
async def served(enforcer: Enforcer) -> AsyncIterator[tuple[str, Kit]]:
    kit = await make_kit(enforcer)
    runner, url = await start_server(enforcer, payments=kit.payments)
    yield url, kit
    await runner.cleanup()


async def send(url: str, token: str, body: dict[str, object]) -> dict[str, str]:
    async with httpx.AsyncClient() as client:
        r = await client.post(f"{url}/v1/send", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    answer: dict[str, str] = r.json()
    return answer


async def test_every_documented_metric_moves_by_what_was_done(
    served: tuple[str, Kit], enforcer: Enforcer, store: EnforcerStore, sink: Sink
) -> None:
    url, kit = served
    _, mailer = await enforcer.create_agent("mailer", "mailer@agents.test", allow=("partner.test",),
                                            hourly=5, daily=7)
    buyer, _ = await kit.agent("buyer", limit=SpendLimit(per_payment=10 * USDC, hourly=30 * USDC,
                                                          daily=50 * USDC))
    before = await scrape(url)
    assert value(before, "envelopay_enforcer_mail_cap_remaining", agent="mailer", window="hour") == 5
    assert value(before, "envelopay_enforcer_spend_cap_remaining", agent="buyer", asset=f"{CHAIN}/USDC",
                 window="day") == 50 * USDC

    frm = {"from": "mailer@agents.test"}
    for n in range(3):  # three plain mails, sent
        got = await send(url, mailer, {**frm, "to": "a@partner.test", "subject": "hi", "text": f"hello {n}"})
        assert got["status"] == "sent", got
    typed = await send(url, mailer, {**frm, "to": "b@partner.test", **WHICH})
    assert typed["status"] == "sent", typed
    held = await send(url, mailer, {**frm, "to": "someone@elsewhere.test", "subject": "hi", "text": "hi"})
    assert held["status"] == "pending_approval"  # off the allowlist: held, no slot taken
    dup = await send(url, mailer, {**frm, "to": "a@partner.test", "subject": "hi", "text": "hello 0"})
    assert (dup["status"], dup.get("code")) == ("blocked", "duplicate")
    stranger = await send(url, "epa_nobody", {**frm, "to": "a@partner.test", "subject": "s", "text": "x"})
    assert stranger["status"] == "blocked" and "code" not in stranger
    odd = await send(url, mailer, {**frm, "to": "a@partner.test", "type": "bogus", "body": {}})
    assert odd["status"] == "blocked", odd
    async with httpx.AsyncClient() as client:  # not JSON at all: refused before any check
        r = await client.post(f"{url}/v1/send", content=b"{", headers={"Authorization": f"Bearer {mailer}"})
    assert r.json()["code"] == "invalid_json"

    paid = await kit.payments.submit("pay", buyer, pay_req(payee_wallet(), 2 * USDC, key="p1"))
    assert paid.state == "sent", paid
    big = await kit.payments.submit("pay", buyer, pay_req(payee_wallet(), 20 * USDC, key="p2"))
    assert big.status == "pending_approval", big  # over the per-payment maximum: held

    after = await scrape(url)
    names = documented("envelopay_enforcer_")
    assert len(names) == 7 and names <= families(after), names - families(after)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("envelopay_enforcer_sends_total", type="none", disposition="sent") == 3
    assert moved("envelopay_enforcer_sends_total", type="which", disposition="sent") == 1
    assert moved("envelopay_enforcer_sends_total", type="none", disposition="pending_approval") == 1
    # The duplicate, the stranger and the body that is not JSON:
    assert moved("envelopay_enforcer_sends_total", type="none", disposition="blocked") == 3
    assert moved("envelopay_enforcer_sends_total", type="other", disposition="blocked") == 1
    assert moved("envelopay_enforcer_refusals_total", code="duplicate") == 1
    assert moved("envelopay_enforcer_refusals_total", code="none") == 2  # the stranger, the bogus type
    assert moved("envelopay_enforcer_refusals_total", code="invalid_json") == 1
    assert moved("envelopay_enforcer_send_seconds_count") == 9  # every request the route answered
    assert value(after, "envelopay_enforcer_approvals_pending", kind="mail") == 1
    assert value(after, "envelopay_enforcer_approvals_pending", kind="payment") == 1
    assert value(after, "envelopay_enforcer_payments", state="PENDING") == 1
    assert value(after, "envelopay_enforcer_payments", state="BROADCAST") == 0  # the paid one finished
    # Four mails left of five this hour, seven today; the held one took no slot.
    assert value(after, "envelopay_enforcer_mail_cap_remaining", agent="mailer", window="hour") == 1
    assert value(after, "envelopay_enforcer_mail_cap_remaining", agent="mailer", window="day") == 3
    # The paid PAY's email took one of the buyer's mail slots; its money, spend headroom.
    assert moved("envelopay_enforcer_mail_cap_remaining", agent="buyer", window="day") == -1
    asset = f"{CHAIN}/USDC"
    assert value(after, "envelopay_enforcer_spend_cap_remaining", agent="buyer", asset=asset, window="hour") \
        == 28 * USDC
    assert value(after, "envelopay_enforcer_spend_cap_remaining", agent="buyer", asset=asset, window="day") \
        == 48 * USDC

    # A killed agent has no headroom to watch: its series go.
    await enforcer.kill_agent("mailer")
    gone = await scrape(url)
    assert ("envelopay_enforcer_mail_cap_remaining", (("agent", "mailer"), ("window", "hour"))) not in gone


async def test_the_send_enforcer_alone_exposes_no_payment_families(enforcer: Enforcer) -> None:
    runner, url = await start_server(enforcer)
    try:
        names = {name for name, _ in await scrape(url)}
    finally:
        await runner.cleanup()
    assert "envelopay_enforcer_approvals_pending" in names
    assert not {n for n in names if n.startswith(("envelopay_enforcer_payments", "envelopay_enforcer_spend"))}


async def test_two_enforcers_in_one_process_keep_their_own_registries(enforcer: Enforcer) -> None:
    one = EnforcerMetrics(enforcer.store, payments=False)
    two = EnforcerMetrics(enforcer.store, payments=False)
    one.sends.labels("none", "sent").inc()
    assert b'envelopay_enforcer_sends_total{disposition="sent",type="none"} 1.0' in await one.exposition()
    assert b"envelopay_enforcer_sends_total{" not in await two.exposition()


def test_enforcer_serve_process_serves_metrics_and_sums_up_at_stop(tmp_path: Path) -> None:
    """`envelopay enforcer serve` as a real process: /metrics over HTTP counts what it
    answered, and SIGTERM prints the summary (README promises one at stop)."""
    import json
    import signal
    import socket
    import subprocess
    import sys

    from aiosmtpd.controller import Controller

    class Keep:
        async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
            return "250 OK"

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        smtp_port = s.getsockname()[1]
    smtp = Controller(Keep(), hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    token_file = tmp_path / "op.token"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envelopay.cli", "enforcer", "serve", "--db", f"sqlite:///{tmp_path}/e.db",
         "--port", "0", "--operator-token-file", str(token_file), "--smtp-host", "127.0.0.1",
         "--smtp-port", str(smtp_port), "--smtp-security", "none", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        url = json.loads(proc.stdout.readline())["listening"]
        op = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        with httpx.Client(base_url=url) as client:
            made = client.post("/v1/agents", json={"name": "mailer", "address": "mailer@agents.test",
                                                    "allow": ["partner.test"]}, headers=op)
            agent = {"Authorization": f"Bearer {made.json()['token']}"}
            mail = {"from": "mailer@agents.test", "to": "a@partner.test", "subject": "hi", "text": "one"}
            assert client.post("/v1/send", json=mail, headers=agent).json()["status"] == "sent"
            assert client.post("/v1/send", json=mail, headers=agent).json()["code"] == "duplicate"
            scraped = client.get("/metrics")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        smtp.stop()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(scraped.text) for s in f.samples}
    assert samples[("envelopay_enforcer_sends_total", (("disposition", "sent"), ("type", "none")))] == 1
    assert samples[("envelopay_enforcer_refusals_total", (("code", "duplicate"),))] == 1
    assert samples[("envelopay_enforcer_mail_cap_remaining", (("agent", "mailer"), ("window", "hour")))] == 19
    assert "summary: 2 send request(s): 1 blocked, 1 sent; refusals: duplicate 1" in err.splitlines()
