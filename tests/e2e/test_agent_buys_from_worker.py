"""An AI agent leashed by the spend enforcer, driven through `envelopay mcp` by the
official MCP client, buys work from our own worker on the devnet (issue 27): every flow,
end to end, as separate processes (tests/e2e/world.py).

Each case asserts all of: the money moved exactly once (USDC balances on the chain,
before and after, on both sides); the worker's flow ended where it should (its ledger,
read as `envelopay flows|show -c worker/envelopay.toml` read it); the agent saw the answer in
`check_inbox`; no payment is left `unknown` (in flight) by `check_payment_status`; and
no OOPS where a FULFILL was due. One world serves the whole module; the cases run in
order, each on flows and payments of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .world import PRICE, WORKER, Agent, Mcp, NotYet, World, eventually, ref_is, running_world

SOL, BASE = "solana-local", "base-local"
CHAINS = pytest.mark.parametrize("chain", [SOL, BASE])
OTHER = {SOL: BASE, BASE: SOL}
LIMITS = ("--spend", f"{SOL}/USDC=50000000/day,1000000/payment",
          "--spend", f"{BASE}/USDC=50000000/day,1000000/payment", "--payee", "garden.local")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    with running_world(tmp_path_factory.mktemp("world")) as w:
        yield w


@pytest.fixture(scope="module")
def buyer(world: World) -> Agent:
    return world.create_agent("buyer", *LIMITS)


@pytest.fixture(scope="module")
def careful(world: World) -> Agent:
    """Its per-payment maximum (0.1 USDC) is below the worker's price: payments wait."""
    return world.create_agent("careful", "--spend", f"{SOL}/USDC=50000000/day,100000/payment",
                              "--spend", f"{BASE}/USDC=50000000/day,100000/payment",
                              "--payee", "garden.local")


@pytest.fixture(scope="module")
def strict(world: World) -> Agent:
    """May pay only INVOICEs (pay_invoice)."""
    return world.create_agent("strict", *LIMITS, "--require-invoice")


@dataclass
class Money:
    """USDC balances of a payer's and a payee's wallet on one chain, from its RPC (by
    default the agent's and the worker's)."""

    world: World
    chain: str
    agent: Agent
    payee_wallet: str = ""

    def read(self) -> tuple[int, int]:
        payee = self.payee_wallet or self.world.worker_wallets[self.chain]
        agent = self.agent.wallets[self.chain]
        return self.world.usdc(self.chain, agent), self.world.usdc(self.chain, payee)


def moved_once(money: Money, before: tuple[int, int], amount: int) -> None:
    """The agent paid `amount` to the payee exactly once (0: nothing moved). A payment is
    final by the time its answer arrives; reading again until equal only absorbs an RPC
    node that has not caught up — a second payment would overshoot and fail."""
    wanted = (before[0] - amount, before[1] + amount)

    def check() -> None:
        now = money.read()
        if now != wanted:
            raise NotYet(f"balances {now}, wanted {wanted} from {before}")

    eventually(check, f"{amount} USDC on {money.chain} from {money.agent.name}, once")


def new_flows(world: World, before: set[str]) -> list[dict[str, Any]]:
    return [world.worker_show(fid) for fid in world.worker_flows() if fid not in before]


def flow_of(world: World, before: set[str], protocol_id: str) -> dict[str, Any]:
    """The worker's one new flow holding the message `protocol_id` (an ORDER's, OFFER's id)."""
    found = [f for f in new_flows(world, before) if any(m["id"] == protocol_id for m in f["messages"])]
    assert len(found) == 1, (protocol_id, found)
    return found[0]


def word_count(text: str, chain: str) -> dict[str, Any]:
    """The ORDER's task, invoiced on `chain`."""
    return {"name": "word_count", "text": text, "rail": f"{chain}/USDC"}


def counted(text: str) -> dict[str, int]:
    return {"words": len(text.split()), "characters": len(text)}


def no_oops(flow: dict[str, Any]) -> None:
    oopses = [m for m in flow["messages"] if m["type"] == "oops" or m["oops"]]
    assert oopses == [], oopses


async def ordered(m: Mcp, order_id: str, task: dict[str, Any]) -> dict[str, Any]:
    """send_order through the enforcer; the worker's INVOICE as check_inbox shows it."""
    sent = await m.call("send_order", {"to": WORKER, "body": {"id": order_id, "task": task}})
    assert sent["status"] == "sent", sent
    return await m.wait_mail(f"the INVOICE for {order_id}", ref_is("invoice", "order_ref", order_id))


async def served(world: World, m: Mcp, before: set[str], order_id: str) -> dict[str, Any]:
    """The FULFILL reached the agent, and the worker's flow ended `fulfilled`, no OOPS."""
    is_fulfill = ref_is("fulfill", "order_ref", order_id)
    fulfill = await m.wait_mail(f"the FULFILL of {order_id}", lambda x: is_fulfill(x) or x["type"] == "oops")
    assert fulfill["type"] == "fulfill", f"an OOPS where the FULFILL was due: {fulfill}"
    assert [x for x in await m.new_mail() if x["type"] == "oops"] == []
    flow = flow_of(world, before, order_id)
    assert flow["flow"]["state"] == "fulfilled", flow
    no_oops(flow)
    return fulfill


# -- ORDER → INVOICE → pay_invoice → FULFILL, on both chains ----------------------------


@CHAINS
async def test_pay_invoice_then_fulfill(world: World, buyer: Agent, chain: str) -> None:
    money = Money(world, chain, buyer)
    before, flows = money.read(), set(world.worker_flows())
    order_id = f"pi-{chain}"
    async with world.mcp(buyer) as m:
        invoice = await ordered(m, order_id, {"name": "word_count", "text": "paid by an agent",
                                              "rail": f"{chain}/USDC"})
        assert (invoice["body"]["chain"], invoice["body"]["amount"]) == (chain, str(PRICE))
        paid = await m.settle(await m.call("pay_invoice", {"invoice": invoice["body"]["id"]}))
        assert paid["status"] == "paid_and_sent", paid
        fulfill = await served(world, m, before=flows, order_id=order_id)
        assert fulfill["body"]["result"] == {"words": 4, "characters": 16}
        again = await m.call("check_payment_status", {"id": paid["id"]})
        assert again["status"] == "paid_and_sent" and again["tx_id"] == paid["tx_id"], again
        # Asked again, the same INVOICE is not paid twice.
        twice = await m.call("pay_invoice", {"invoice": invoice["body"]["id"]})
        assert twice["status"] != "unknown" and twice.get("id") in (None, paid["id"]), twice
    moved_once(money, before, PRICE)


# -- pay, naming the open INVOICE --------------------------------------------------------


@CHAINS
async def test_pay_settles_an_open_invoice(world: World, buyer: Agent, chain: str) -> None:
    money = Money(world, chain, buyer)
    before, flows = money.read(), set(world.worker_flows())
    async with world.mcp(buyer) as m:
        inv = (await ordered(m, f"pay-open-{chain}", word_count("settled by pay", chain)))["body"]
        assert inv["chain"] == chain, inv
        request = {"to": WORKER, "amount": inv["amount"], "token": inv["token"], "chain": inv["chain"],
                   "wallet": inv["wallet"], "idempotency_key": f"pay-open-{chain}", "invoice_ref": inv["id"]}
        paid = await m.settle(await m.call("pay", request))
        assert paid["status"] == "paid_and_sent", paid
        await served(world, m, before=flows, order_id=f"pay-open-{chain}")
        retried = await m.call("pay", request)
        # The same key: the first outcome, not a second payment.
        assert (retried["status"], retried["id"]) == ("paid_and_sent", paid["id"]), retried
    moved_once(money, before, PRICE)


# -- a prepaid ORDER (v0.2: amount, token, chain and proof in the ORDER) ----------------


@CHAINS
async def test_prepaid_order_is_fulfilled_at_once(world: World, buyer: Agent, chain: str) -> None:
    money = Money(world, chain, buyer)
    text = f"paid up front on {chain}"
    before, flows = money.read(), set(world.worker_flows())
    async with world.mcp(buyer) as m:
        # One call pays and sends the ORDER carrying its proof.
        assert "prepaid_order" in await m.tools()
        paid = await m.settle(await m.call("prepaid_order", {
            "to": WORKER, "amount": str(PRICE), "token": "USDC", "chain": chain,
            "wallet": world.worker_wallets[chain], "idempotency_key": f"prepaid-{chain}",
            "task": {"name": "word_count", "text": text}}))
        assert paid["status"] == "paid_and_sent", paid
        fulfill = await m.wait_mail("the FULFILL of the prepaid ORDER", lambda x: x["type"] == "oops"
                                    or (x["type"] == "fulfill" and x["body"]["result"] == counted(text)))
        assert fulfill["type"] == "fulfill", f"an OOPS where the FULFILL was due: {fulfill}"
        flows_now = new_flows(world, flows)
        assert [f["flow"]["state"] for f in flows_now] == ["fulfilled"], flows_now
        no_oops(flows_now[0])
        assert fulfill["body"]["order_ref"] in {x["id"] for x in flows_now[0]["messages"]}
    moved_once(money, before, PRICE)


# -- OFFER → ACCEPT against the worker's [[exchange]] ------------------------------------


@CHAINS
async def test_offer_accepted_by_the_workers_exchange(world: World, buyer: Agent, chain: str) -> None:
    """The agent gives 1 USDC on `chain` for 1 USDC on the other, as the worker trades."""
    give, want = Money(world, chain, buyer), Money(world, OTHER[chain], buyer)
    give_before, want_before, flows = give.read(), want.read(), set(world.worker_flows())
    async with world.mcp(buyer) as m:
        offered = await m.settle(await m.call("make_offer", {
            "to": WORKER, "amount": "1000000", "token": "USDC", "chain": chain,
            "wallet": world.worker_wallets[chain], "idempotency_key": f"offer-{chain}",
            "want": {"amount": "1000000", "token": "USDC", "chain": OTHER[chain]}}))
        assert offered["status"] == "paid_and_sent", offered
        flow = eventually(lambda: _one_new(world, flows), "the worker's exchange flow")
        offer_id = next(x["id"] for x in flow["messages"] if x["type"] == "offer")
        accept = await m.wait_mail("the worker's ACCEPT", lambda x: ref_is("accept", "offer_ref", offer_id)(x)
                                   or x["type"] == "oops")
        assert accept["type"] == "accept", f"an OOPS where the ACCEPT was due: {accept}"
        assert (accept["body"]["amount"], accept["body"]["chain"]) == ("1000000", OTHER[chain]), accept
        flow = flow_of(world, flows, offer_id)
        assert (flow["flow"]["kind"], flow["flow"]["state"]) == ("exchange", "accepted"), flow
        no_oops(flow)
    moved_once(give, give_before, 1_000_000)  # the agent's give leg, to the worker
    moved_once(want, want_before, -1_000_000)  # the worker's counter-leg, back to the agent


def _one_new(world: World, before: set[str]) -> dict[str, Any]:
    flows = new_flows(world, before)
    if not flows:
        raise NotYet("no new flow at the worker")
    assert len(flows) == 1, flows
    return flows[0]


# -- held for approval, approved by the operator, then served ---------------------------


@CHAINS
async def test_held_payment_approved_then_served(world: World, careful: Agent, chain: str) -> None:
    money = Money(world, chain, careful)
    before, flows = money.read(), set(world.worker_flows())
    async with world.mcp(careful) as m:
        inv = (await ordered(m, f"held-{chain}", word_count("approve me", chain)))["body"]
        held = await m.call("pay_invoice", {"invoice": inv["id"]})
        assert held["status"] == "pending_approval" and held["approval_id"], held
        assert money.read() == before  # nothing moves while it waits
        listed = world.cli_json("approvals", "list")["approvals"]
        assert held["approval_id"] in {a["id"] for a in listed}, listed
        decided = world.approve(held["approval_id"])
        assert decided["exit"] == 0, decided
        paid = await m.settle(await m.call("check_payment_status", {"id": held["id"]}))
        assert paid["status"] == "paid_and_sent", paid
        await served(world, m, before=flows, order_id=f"held-{chain}")
        again = world.cli_json("approvals", "approve", held["approval_id"], expect=1)  # decided already
        assert again["exit"] == 1, again
    moved_once(money, before, PRICE)


# -- refused by policy: nothing moves ----------------------------------------------------


@CHAINS
async def test_policy_refusal_moves_nothing(world: World, strict: Agent, chain: str) -> None:
    money = Money(world, chain, strict)
    before, flows = money.read(), set(world.worker_flows())
    async with world.mcp(strict) as m:
        inv = (await ordered(m, f"strict-{chain}", word_count("not like this", chain)))["body"]
        refused = await m.call("pay", {
            "to": WORKER, "amount": inv["amount"], "token": inv["token"], "chain": inv["chain"],
            "wallet": inv["wallet"], "idempotency_key": f"strict-{chain}"})
        assert (refused["status"], refused["code"]) == ("blocked", "invoice_required"), refused
        assert not refused.get("tx_id") and not refused.get("message_id"), refused
        flow = flow_of(world, flows, f"strict-{chain}")
        assert flow["flow"]["state"] == "invoiced" and flow["payments"] == [], flow  # no PAY reached it
    moved_once(money, before, 0)


# -- the worker refuses the PAY: the agent is told, never "paid_and_sent" alone ----------


@CHAINS
async def test_worker_refuses_the_pay_and_the_agent_is_told(world: World, buyer: Agent, chain: str) -> None:
    """The agent pays the price into a wallet that is not the worker's (one it was given
    elsewhere; nothing the enforcer could check): the money moves, the worker answers the
    PAY with an OOPS, and check_payment_status says `paid_refused` with the OOPS code —
    never `paid_and_sent` alone."""
    stranger = new_wallet(chain)
    money, worker = Money(world, chain, buyer, stranger), Money(world, chain, buyer)
    before, worker_before, flows = money.read(), worker.read()[1], set(world.worker_flows())
    async with world.mcp(buyer) as m:
        paid = await m.settle(await m.call("pay", {
            "to": WORKER, "amount": str(PRICE), "token": "USDC", "chain": chain, "wallet": stranger,
            "idempotency_key": f"elsewhere-{chain}"}))
        assert paid["status"] in ("paid_and_sent", "paid_refused") and paid["tx_id"], paid
        oops = await m.wait_mail("the worker's OOPS", lambda x: x["type"] == "oops")
        code = (oops["body"].get("error") or {}).get("code")
        assert code, oops
        assert code == "recipient_mismatch", oops
        status = await m.wait_status(paid["id"], "paid_refused")
        assert status["code"] == code and status["tx_id"] == paid["tx_id"], status
        assert new_flows(world, flows) == []  # refused at the door: no flow took the PAY, nothing served
    moved_once(money, before, PRICE)
    assert world.usdc(chain, world.worker_wallets[chain]) == worker_before  # the worker got nothing


def new_wallet(chain: str) -> str:
    """A wallet nobody here holds."""
    if chain == SOL:
        from solders.keypair import Keypair

        return str(Keypair().pubkey())
    from eth_account import Account

    return str(Account.create().address)


@CHAINS
async def test_pay_contradicting_its_invoice_is_blocked(world: World, buyer: Agent, chain: str) -> None:
    """A short payment naming its INVOICE: the enforcer can see the payee would refuse
    it, so it is `blocked` and nothing moves (issue 27, Build 1)."""
    money = Money(world, chain, buyer)
    before = money.read()
    async with world.mcp(buyer) as m:
        inv = (await ordered(m, f"short-{chain}", word_count("underpaid", chain)))["body"]
        refused = await m.call("pay", {
            "to": WORKER, "amount": str(PRICE - 50_000), "token": inv["token"], "chain": inv["chain"],
            "wallet": inv["wallet"], "idempotency_key": f"short-{chain}", "invoice_ref": inv["id"]})
        assert refused["status"] == "blocked" and not refused.get("tx_id"), refused
    moved_once(money, before, 0)


@pytest.fixture(scope="module")
def broke(world: World) -> Agent:
    """Its wallets were never funded: as every wallet after a devnet restart."""
    return world.create_agent("broke", *LIMITS, usdc=None)


@CHAINS
async def test_empty_wallet_names_envelopay_fund(world: World, broke: Agent, chain: str) -> None:
    """A restarted devnet leaves the agents' wallets empty: the payment fails
    insufficient_funds, nothing moves, and the reason names the command that funds it."""
    money = Money(world, chain, broke)
    before = money.read()
    async with world.mcp(broke) as m:
        failed = await m.call("pay", {"to": WORKER, "amount": str(PRICE), "token": "USDC", "chain": chain,
                                      "wallet": world.worker_wallets[chain],
                                      "idempotency_key": f"broke-{chain}"})
        assert (failed["status"], failed["code"]) == ("failed", "insufficient_funds"), failed
        assert f"envelopay fund {broke.wallets[chain]}" in failed["reason"], failed
        assert not failed.get("message_id"), failed  # no PAY went out
    moved_once(money, before, 0)


@pytest.fixture(scope="module")
def unfunded_cli_buyer(world: World) -> dict[str, str]:
    """An agent of its own (`init --devnet --no-fund`): its wallets, as after a restart."""
    return dict(world.cli_json("init", "--devnet", "--address", "poor@garden.local", "--dir", "poor",
                               "--no-fund")["wallets"])


@CHAINS
def test_cli_pay_from_an_empty_wallet_names_envelopay_fund(
    world: World, unfunded_cli_buyer: dict[str, str], chain: str
) -> None:
    """`envelopay pay` from an agent's own empty wallet: exit 3, insufficient_funds, and
    the detail names the command that funds it; nothing paid, nothing sent."""
    flows = set(world.worker_flows())
    doc = world.cli_json("pay", WORKER, "--amount", str(PRICE), "--token", "USDC", "--chain", chain,
                         "--wallet", world.worker_wallets[chain], "-c", "poor/envelopay.toml", expect=3)
    assert doc["error"] == "insufficient_funds", doc
    assert f"envelopay fund {unfunded_cli_buyer[chain]}" in doc["detail"], doc
    assert set(world.worker_flows()) == flows  # no PAY reached the worker


def test_worker_ledger_as_the_cli_reads_it(world: World) -> None:
    """The world reads the worker's ledger in-process; `envelopay flows|show` say the same."""
    flows = world.worker_flows()
    assert flows, "the cases above left flows"
    doc = world.cli_json("flows", "-c", "worker/envelopay.toml", "--limit", "500")
    assert {f["id"]: f for f in doc["flows"]} == flows
    some = next(iter(flows))
    shown = world.cli_json("show", some, "-c", "worker/envelopay.toml")
    assert shown == world.worker_show(some)


def test_agent_environment_is_copyable(world: World, buyer: Agent) -> None:
    """What `agent create --devnet` printed works as copied: exported, an absolute socket
    path, the agent's garden Maildir (the garden's per-address folder)."""
    assert Path(buyer.env["ENVELOPAY_ENFORCER"]) == world.socket
    maildir = Path(buyer.env["ENVELOPAY_AGENT_MAILDIR"])
    assert maildir == world.root / "devnet" / "garden" / buyer.address
    assert all((maildir / sub).is_dir() for sub in ("new", "cur", "tmp"))


def test_agent_create_devnet_refusals(world: World, tmp_path: Path) -> None:
    """--devnet with no devnet running: exit 3 before the agent exists (nothing half made).
    A garden without the enforcer's account: the agent is made, its mailbox too, and the
    output says the enforcer cannot send as it yet (and how to fix it)."""
    nowhere = {**world.env, "ENVELOPAY_DEVNET_HOME": str(tmp_path / "no-devnet")}
    done = world.cli("agent", "create", "lost", "--address", "lost@garden.local", "--devnet", "--json",
                     env=nowhere, expect=3)
    assert json.loads(done.stdout)["error"] == "config" and "no devnet is running" in done.stdout, done.stdout
    names = {a["name"] for a in world.cli_json("agent", "list")["agents"]}
    assert "lost" not in names, names
    other = {**world.env, "ENVELOPAY_GARDEN_USER": "relay"}
    made = world.cli("agent", "create", "mute", "--address", "mute@garden.local", "--devnet", env=other)
    assert "warning: the garden has no account 'relay'" in made.stdout, made.stdout
    assert (world.root / "devnet" / "garden" / "mute@garden.local" / "new").is_dir()
    accounts = json.loads((world.root / "devnet" / "garden-accounts.json").read_text())
    assert [a["user"] for a in accounts] == ["enforcer"], accounts
    assert "mute@garden.local" not in accounts[0]["addresses"], accounts


async def test_no_payment_left_in_flight(world: World) -> None:
    """After every case: each payment the agents made has an outcome (none `unknown`,
    in flight), and no approval waits. (Selected alone, the world has made no payment:
    what is checked then is that nothing waits.)"""
    for name in sorted({agent for agent, _ in world.payments}):
        async with world.mcp(world.agents[name]) as m:
            for pid in sorted({p for a, p in world.payments if a == name}):
                status = await m.call("check_payment_status", {"id": pid})
                assert status["status"] not in ("unknown", "pending_approval"), (name, status)
    waiting = [a for a in world.cli_json("approvals", "list")["approvals"] if a["state"].lower() == "pending"]
    assert waiting == [], waiting
