"""`envelopay demo`: a buyer and a paid worker on embedded defaults, no network.

Everything real and in one process: the walled garden (LMTP server → Maildirs, picked
up by inotify; every sender authenticates with its own garden secret), a SQLite ledger
per agent, DKIM signing and verification, LiteSVM for Solana and eth-tester for Base.
The script plays:

1. first contact WHICH→METHODS→ORDER→INVOICE→PAY→FULFILL with USDC on Solana;
2. the same with USDC on Base;
3. one exchange OFFER→ACCEPT (SOL on Solana for USDC on Base);
4. five attacks on an open INVOICE that must fail, each with the flow left unchanged:
   a replayed PAY proof, an underpaid proof (refunded), a proof paying the wrong recipient (each
   answered with its OOPS code), a PAY "From" the buyer sent by another garden insider
   (Mallory, authenticated as herself: the garden refuses it, 550 5.7.1, and nothing is
   delivered), and a PAY whose DKIM signature is forged (OOPS dkim_failed); then the
   honest PAY, which still succeeds.

Each expectation is checked; the result is a table and a summary, and `ok` is False
(CLI exit 1) if anything deviates.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay import dkim
from envelopay.config import WorkerConfig, config_from_dict
from envelopay.devnet.plugins import LocalWallet, dev_chain
from envelopay.engine import BaseApplication, Notice, Outcome
from envelopay.mail.garden import GardenServer, deliver
from envelopay.mail.garden_auth import account_with, load_accounts, put_account, write_secret
from envelopay.mail.maildir import mailbox_path
from envelopay.node.agent_node import build_node
from envelopay.protocol.compose import compose_message
from envelopay.protocol.messages import (
    Fulfill,
    Give,
    Invoice,
    Message,
    Methods,
    Offer,
    Order,
    Pay,
    Want,
    Which,
)
from envelopay.rails.amounts import Decimals, amount_text, asset_decimals, no_decimals
from envelopay.rails.interface import Rail
from envelopay.rails.registry import make
from envelopay.worker.refunding import RefundsMoney
from envelopay.worker.refunds import refunder_for

__all__ = ["DemoResult", "DemoWorld", "Row", "run_demo"]

DOMAIN = "garden.local"
BUYER = f"buyer@{DOMAIN}"
WORKER = f"worker@{DOMAIN}"
MALLORY = f"mallory@{DOMAIN}"
PRICE = 250_000  # 0.25 USDC (6 decimals)
STEP_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Row:
    step: str
    direction: str
    message: str
    got: str
    expected: str
    ok: bool


@dataclass
class DemoResult:
    rows: list[Row] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.ok for r in self.rows)

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]


class BuyerApp(BaseApplication):
    """The buyer's side: it takes back its own wallets (ACCEPT legs) and records what
    arrives; the demo script decides what to pay."""

    def __init__(self, wallets: dict[tuple[str, str], str]) -> None:
        self.wallets = wallets
        self.notices: list[Notice] = []

    def wallet(self, chain: str, token: str) -> str | None:
        return self.wallets.get((chain, token))

    async def notify(self, notice: Notice) -> None:
        self.notices.append(notice)


def _describe(msg: Message | None, decimals: Decimals = no_decimals) -> str:
    """A message as the demo's table shows it: amounts in the asset's units (0.25 USDC)."""
    if msg is None:
        return "—"
    kind = msg.type.upper()

    def money(units: int, token: str, chain: str) -> str:
        return amount_text(units, token, decimals(chain, token))

    if isinstance(msg, Methods):
        return f"{kind} " + " ".join(
            f"{r.chain}/{r.token}={money(r.price, r.token, r.chain) if r.price is not None else '?'}"
            for r in msg.rails
        )
    if isinstance(msg, Invoice | Pay):
        return f"{kind} {money(msg.amount, msg.token, msg.chain)} on {msg.chain}"
    if isinstance(msg, Fulfill):
        return f"{kind} {json.dumps(msg.result, separators=(',', ':'))}"
    if isinstance(msg, Offer):
        give, want = msg.give, msg.want
        gives, wants = money(give.amount, give.token, give.chain), money(want.amount, want.token, want.chain)
        return f"{kind} give {gives} for {wants}"
    code = getattr(getattr(msg, "error", None), "code", None)
    return f"{kind} {code}" if code else kind


class DemoWorld:
    def __init__(self, workdir: Path, echo: Callable[[Row], None] | None) -> None:
        self.workdir = workdir
        self.echo = echo
        self.result = DemoResult()
        self.garden_fsync = False
        # A garden already running elsewhere (its own process, say) serving
        # workdir/garden on this loopback port; None starts one in this process.
        self.garden_port: int | None = None
        self.buyer_usdc = 50_000_000  # 50 USDC on each chain
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.secrets: dict[str, str] = {}  # address → garden secret (files under keys/)

    def check(self, step: str, direction: str, message: str, got: str, expected: str, ok: bool) -> bool:
        row = Row(step, direction, message, got, expected, ok)
        self.result.rows.append(row)
        if self.echo is not None:
            self.echo(row)
        return ok

    # -- set-up ----------------------------------------------------------------------
    async def setup(self) -> None:
        worker_rails = self._chains()
        records = self._dkim_records()
        port = await self._start_garden()
        worker_cfg, buyer_cfg = self._configs(records, port)
        self.buyer_app = BuyerApp({
            ("solana-local", "USDC"): self.wallets["buyer_sol"],
            ("solana-local", "SOL"): self.wallets["buyer_sol"],
            ("base-local", "USDC"): self.wallets["buyer_base"],
        })
        self.worker = build_node(worker_cfg, rails=worker_rails, clock=self.clock)
        app = self.worker.engine.app  # money it cannot use goes back (SPEC.md "Refunds"), from
        if isinstance(app, RefundsMoney):  # its own keys, as `[rails.NAME] keypair` gives them
            app.refunder = refunder_for(self.worker.store, rails=worker_rails, keys=self.worker_keys,
                                        owner="worker", clock=self.clock)
        self.buyer = build_node(buyer_cfg, app=self.buyer_app, rails=self.buyer_rails, clock=self.clock)
        self.decimals = asset_decimals(self.buyer_rails)
        self.stop = asyncio.Event()
        self.loops = [asyncio.create_task(n.serve(self.stop)) for n in (self.worker, self.buyer)]
        self.result.facts["wallets"] = self.wallets

    def _chains(self) -> dict[str, Rail]:
        """In-process chains, from the rail distributions' dev chains (entry points), with
        the parties' funded wallets; the buyer's and Mallory's rails are kept, the
        worker's returned."""
        self.sol = dev_chain("solana").local()
        self.base = dev_chain("base").local()
        buyer_sol = self.sol.new_wallet(native=20 * 10**9, usdc=self.buyer_usdc)
        worker_sol = self.sol.new_wallet(native=2 * 10**9)
        mallory_sol = self.sol.new_wallet(native=2 * 10**9, usdc=10_000_000)
        self.mallory_sol_wallet = mallory_sol.address
        buyer_base = self.base.new_wallet(native=10**18, usdc=self.buyer_usdc)
        worker_base = self.base.new_wallet(native=10**18, usdc=200_000_000)

        def rails_for(sol: LocalWallet, base: LocalWallet) -> dict[str, Rail]:
            rs = make("solana", self.sol.rail_options(sol.key))
            rb = make("base", self.base.rail_options(base.key))
            return {rs.chains[0]: rs, rb.chains[0]: rb}

        self.buyer_rails = rails_for(buyer_sol, buyer_base)
        worker_rails = rails_for(worker_sol, worker_base)
        self.worker_keys = {"solana": worker_sol.key, "base": worker_base.key}  # by rail name
        self.mallory_rails = rails_for(mallory_sol, self.base.new_wallet())
        self.wallets = {
            "buyer_sol": buyer_sol.address, "worker_sol": worker_sol.address,
            "buyer_base": buyer_base.address, "worker_base": worker_base.address,
        }
        return worker_rails

    def _dkim_records(self) -> dict[str, str]:
        """The buyer's and the worker's DKIM keys under keys/, and their DNS records."""
        keys = self.workdir / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        records: dict[str, str] = {}
        for who in ("buyer", "worker"):
            key = dkim.DkimKey.generate_ed25519()
            (keys / f"{who}.pem").write_bytes(key.private_pem())
            records[f"{who}._domainkey.{DOMAIN}"] = key.dns_txt_record()
            if who == "buyer":
                self.buyer_key = key
        self.mallory_key = dkim.DkimKey.generate_ed25519()
        return records

    async def _start_garden(self) -> int | None:
        """The garden's LMTP port: one already running elsewhere, else one started here."""
        # The demo skips fsync (throwaway files); the benchmark keeps it on.
        accounts = self.garden_accounts()
        port = self.garden_port
        if port is None:
            self.garden = GardenServer(
                self.workdir / "garden", [BUYER, WORKER, MALLORY], fsync=self.garden_fsync,
                accounts=load_accounts(accounts),
            )
            await self.garden.start()
            endpoint = self.garden.endpoint
            port = endpoint[1] if isinstance(endpoint, tuple) else None
        return port

    def _configs(self, records: dict[str, str], port: int | None) -> tuple[WorkerConfig, WorkerConfig]:
        """The worker's config (its tasks, rails and exchange) and the buyer's."""

        def cfg(who: str, extra: dict[str, Any]) -> WorkerConfig:
            return config_from_dict(
                {
                    "agent": {
                        "address": f"{who}@{DOMAIN}", "domain": DOMAIN,
                        "ledger": str(self.workdir / f"{who}.db"),
                        "dkim_selector": who, "dkim_key": f"keys/{who}.pem",
                        "dkim_policy": "required", "worker_id": who,
                    },
                    "transport": {"kind": "garden", "garden_root": "garden", "lmtp_port": port,
                                  "garden_secret_file": f"keys/{who}.garden"},
                    "dkim_records": records,
                    **extra,
                },
                base_dir=self.workdir,
            )

        worker_cfg = cfg("worker", {
            "accept": [
                {"chain": "solana-local", "token": "USDC", "wallet": self.wallets["worker_sol"]},
                {"chain": "base-local", "token": "USDC", "wallet": self.wallets["worker_base"]},
            ],
            "tasks": [
                {"name": "word_count", "handler": "envelopay.worker.operations:word_count",
                 "schema": "envelopay.worker.operations:WordCount", "price": str(PRICE)},
                {"name": "digest", "handler": "envelopay.worker.operations:digest",
                 "schema": "envelopay.worker.operations:Digest", "price": "0"},
            ],
            "exchange": [{
                "give": "solana-local/SOL", "want": "base-local/USDC",
                "give_unit": str(10**9), "want_per_unit": "30000000", "max_want": "100000000",
            }],
            "wallets": {"solana-local": self.wallets["worker_sol"]},
        })
        return worker_cfg, cfg("buyer", {})

    def garden_accounts(self) -> Path:
        """Each agent's garden secret (keys/<who>.garden, 0600) and the accounts file the
        garden checks them against (its hashes only); a garden in another process is
        started with this file (`envelopay garden serve --accounts`)."""
        path = self.workdir / "garden-accounts.json"
        for who in (BUYER, WORKER, MALLORY):
            secret = write_secret(self.workdir / "keys" / f"{who.split('@')[0]}.garden")
            self.secrets[who] = secret
            put_account(path, account_with(who, [who], secret))
        return path

    async def teardown(self) -> None:
        if hasattr(self, "stop"):
            self.stop.set()
            await asyncio.gather(*self.loops, return_exceptions=True)
        for node in (getattr(self, "worker", None), getattr(self, "buyer", None)):
            if node is not None:
                await node.close()
                node.store.close()
        if hasattr(self, "garden"):
            await self.garden.stop()

    # -- one exchange of mail ------------------------------------------------------------
    async def exchange(
        self, message: Message, *, flow_id: str | None = None
    ) -> tuple[Outcome, Message | None, str]:
        """Buyer sends through its engine; wait for the worker's outcome and for the buyer
        to take in the reply. Returns (worker outcome, reply, buyer's flow id)."""
        sent = await self.buyer.send(message, WORKER, flow_id=flow_id)
        outcome = await self.worker.wait_outcome(sent.message_id, STEP_TIMEOUT)
        reply = await self._reply_of(outcome)
        return outcome, reply, sent.flow_id

    async def _reply_of(self, outcome: Outcome) -> Message | None:
        if not outcome.outbox:
            return None
        mid = outcome.outbox[0]
        await self.buyer.wait_outcome(mid, STEP_TIMEOUT)
        row = self.worker.store.outbox_get(mid)
        return row.outbound.message if row is not None else None

    def flow_state(self, flow_id: str | None) -> str | None:
        if flow_id is None:
            return None
        rec = self.worker.store.get_flow(flow_id)
        return rec.state if rec is not None else None

    async def pay(
        self, rails: dict[str, Rail], chain: str, token: str, amount: int, to: str
    ) -> dict[str, Any]:
        # The local Base chain mines the confirming blocks with each transaction.
        return await rails[chain].pay(chain=chain, token=token, amount=amount, recipient=to)

    # -- the script -------------------------------------------------------------------------
    async def first_contact(
        self, chain: str, step: str, n: int
    ) -> tuple[str, Invoice | None, dict[str, Any]]:
        task = {"name": "word_count", "text": f"pay me on {chain} please", "rail": f"{chain}/USDC"}
        out, reply, bflow = await self.exchange(Which(id=f"wch_{n}", task=task, note="What do you accept?"))
        ok = isinstance(reply, Methods) and any(r.chain == chain and r.price == PRICE for r in reply.rails)
        price = amount_text(PRICE, "USDC", self.decimals(chain, "USDC"))
        got = _describe(reply, self.decimals)
        self.check(step, "B→W", "WHICH", got, f"METHODS with {chain} price {price}", ok)

        order = Order(id=f"ord_{n}", task=task, note="Count my words")
        out, reply, _ = await self.exchange(order, flow_id=bflow)
        inv = reply if isinstance(reply, Invoice) else None
        ok = inv is not None and inv.amount == PRICE and inv.chain == chain and inv.order_ref == f"ord_{n}"
        self.check(step, "B→W", "ORDER", _describe(reply, self.decimals), f"INVOICE {price} on {chain}", ok)
        flow = out.flow_id or ""
        if inv is None:
            return flow, None, {}
        proof = await self.pay(self.buyer_rails, chain, "USDC", inv.amount, inv.wallet)
        pay = Pay(id=f"pay_{n}", amount=inv.amount, token="USDC", chain=chain, proof=proof,
                  invoice_ref=inv.id)
        out, reply, _ = await self.exchange(pay, flow_id=bflow)
        ok = isinstance(reply, Fulfill) and reply.result == {"words": 5, "characters": len(task["text"])}
        self.check(step, "B→W", "PAY (paid on-chain first)", _describe(reply, self.decimals),
                   "FULFILL with the result", ok)
        state = self.flow_state(out.flow_id)
        self.check(step, "W", "flow state", str(state), "fulfilled", state == "fulfilled")
        return flow, inv, proof

    async def offer(self) -> None:
        step = "OFFER→ACCEPT"
        give_amount = 10**9  # 1 SOL
        want_amount = 30_000_000  # 30 USDC
        before = self.base.usdc_balance(self.wallets["buyer_base"])
        to = self.wallets["worker_sol"]
        proof = await self.pay(self.buyer_rails, "solana-local", "SOL", give_amount, to)
        offer = Offer(
            id="ofr_1",
            give=Give(amount=give_amount, token="SOL", chain="solana-local", to=self.wallets["worker_sol"],
                      proof=proof),
            want=Want(amount=want_amount, token="USDC", chain="base-local"),
            wallet=self.wallets["buyer_base"],
            note="1 SOL for 30 USDC",
        )
        out, reply, _ = await self.exchange(offer)
        got = _describe(reply, self.decimals)
        ok = reply is not None and reply.type == "accept" and getattr(reply, "amount", None) == want_amount
        self.check(step, "B→W", "OFFER (1 SOL paid first)", got, "ACCEPT with the USDC proof", ok)
        gained = (self.base.usdc_balance(self.wallets["buyer_base"]) or 0) - (before or 0)
        usdc = self.decimals("base-local", "USDC")
        self.check(step, "chain", "buyer's USDC on base-local", f"+{amount_text(gained, 'USDC', usdc)}",
                   f"+{amount_text(want_amount, 'USDC', usdc)}",
                   gained == want_amount)
        bstate = None
        if out.outbox:
            seen = await self.buyer.wait_outcome(out.outbox[0], STEP_TIMEOUT)
            bstate = seen.state if seen.status == "processed" else f"{seen.status} {seen.oops}"
        self.check(step, "B", "ACCEPT proof, as the buyer verifies it", str(bstate), "accepted",
                   bstate == "accepted")

    async def attacks(self, old_proof: dict[str, Any]) -> None:
        step = "attacks"
        chain = "solana-local"
        task = {"name": "word_count", "text": "attack surface", "rail": f"{chain}/USDC"}
        out, reply, bflow = await self.exchange(Order(id="ord_9", task=task))
        inv = reply if isinstance(reply, Invoice) else None
        self.check(step, "B→W", "ORDER", _describe(reply, self.decimals), "INVOICE", inv is not None)
        if inv is None:
            return
        flow = out.flow_id
        state0 = self.flow_state(flow)

        async def attempt(what: str, pay: Pay, expect: str, *, forged: bool = False, back: int = 0) -> None:
            # Attack mail is written by hand and dropped into the garden: the buyer's own
            # engine would refuse to send a second PAY for one INVOICE. `back`: units refunded.
            before = self.sol.usdc_balance(self.wallets["buyer_sol"]) or 0
            outcome = await self.inject(pay, forged=forged)  # answered once the refund is paid
            code = outcome.oops.value if outcome.oops else outcome.status
            got_back = (self.sol.usdc_balance(self.wallets["buyer_sol"]) or 0) - before
            state = self.flow_state(flow)
            ok = code == expect and state == state0 and got_back == back
            self.check(step, "M→W" if forged else "B→W", what, f"OOPS {code}{self._back(got_back)}; "
                       f"flow {state}", f"OOPS {expect}{self._back(back)}; flow {state0}", ok)

        def pay_msg(pid: str, proof: dict[str, Any]) -> Pay:
            return Pay(id=pid, amount=inv.amount, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)

        await attempt("PAY replaying a spent proof", pay_msg("pay_91", old_proof), "proof_replayed")
        under = await self.pay(self.buyer_rails, chain, "USDC", inv.amount - 1, inv.wallet)
        await attempt("PAY with an underpaid proof", pay_msg("pay_92", under), "amount_mismatch",
                      back=inv.amount - 1)
        wrong = await self.pay(self.buyer_rails, chain, "USDC", inv.amount, self.mallory_sol_wallet)
        await attempt("PAY to the wrong recipient", pay_msg("pay_93", wrong), "recipient_mismatch")
        fresh = await self.pay(self.mallory_rails, chain, "USDC", inv.amount, inv.wallet)
        await self.impersonation(step, pay_msg("pay_94", fresh), flow, state0)
        await attempt("PAY with a forged DKIM signature", pay_msg("pay_96", fresh), "dkim_failed",
                      forged=True)

        honest = await self.pay(self.buyer_rails, chain, "USDC", inv.amount, inv.wallet)
        out, reply, _ = await self.exchange(pay_msg("pay_95", honest), flow_id=bflow)
        self.check(step, "B→W", "honest PAY after the attacks", _describe(reply, self.decimals), "FULFILL",
                   isinstance(reply, Fulfill))

    def _back(self, units: int) -> str:
        return f", refunded {amount_text(units, 'USDC', self.decimals('solana-local', 'USDC'))}" * bool(units)

    def _endpoint(self) -> tuple[str, int] | Path:
        return self.garden.endpoint if self.garden_port is None else ("127.0.0.1", self.garden_port)

    async def inject(self, pay: Pay, *, forged: bool) -> Outcome:
        """A PAY written by hand and delivered with its sender's own garden credential:
        from the buyer, signed with the buyer's key (a misbehaving buyer), or, forged, from
        Mallory (the garden lets her send only as herself) signed with her key under the
        buyer's selector, a signature that cannot verify."""
        sender = MALLORY if forged else BUYER
        raw, mid = compose_message(pay, sender=sender, recipient=WORKER, domain=DOMAIN, now=self.clock())
        key = self.mallory_key if forged else self.buyer_key
        signed = dkim.sign(raw, selector="buyer", domain=DOMAIN, key=key)
        await deliver(signed, sender, [WORKER], self._endpoint(), auth=(sender, self.secrets[sender]))
        return await self.worker.wait_outcome(mid, STEP_TIMEOUT)

    async def impersonation(self, step: str, pay: Pay, flow: str | None, state0: str | None) -> None:
        """Mallory, a garden insider authenticated as herself, sends a PAY "From" the buyer
        (signed by the buyer's key even: DKIM could not tell them apart). The garden must
        refuse it, with its code, and the worker must never see it."""
        raw, mid = compose_message(pay, sender=BUYER, recipient=WORKER, domain=DOMAIN, now=self.clock())
        signed = dkim.sign(raw, selector="buyer", domain=DOMAIN, key=self.buyer_key)
        creds = (MALLORY, self.secrets[MALLORY])
        result = await deliver(signed, MALLORY, [WORKER], self._endpoint(), auth=creds)
        reply = result.replies[WORKER]
        # A 250 is given only once the copy is in the Maildir, so after the answer a
        # delivered copy would be there (new/, or cur/ once picked up) or in the ledger.
        box = mailbox_path(self.workdir / "garden", WORKER)
        seen = self.worker.store.inbound_outcome(WORKER, mid) is not None or any(
            mid.encode() in f.read_bytes() for d in ("new", "cur") for f in (box / d).glob("*"))
        state = self.flow_state(flow)
        ok = reply.code == 550 and reply.text.startswith("5.7.1") and not seen and state == state0
        got = f"garden {reply.code} {reply.text[:5]}; worker saw {'it' if seen else 'nothing'}; flow {state}"
        self.check(step, "M→W", "PAY From the buyer by another insider", got,
                   f"garden 550 5.7.1; worker saw nothing; flow {state0}", ok)

    async def run(self) -> DemoResult:
        started = time.monotonic()
        try:
            await self.setup()
            _, _, sol_proof = await self.first_contact("solana-local", "1st contact, Solana", 1)
            await self.first_contact("base-local", "1st contact, Base", 2)
            await self.offer()
            if sol_proof:
                await self.attacks(sol_proof)
            else:
                self.check("attacks", "—", "skipped", "no first Solana proof", "run", False)
            w = self.wallets
            self.result.facts["worker_usdc_solana"] = self.sol.usdc_balance(w["worker_sol"])
            self.result.facts["worker_usdc_base"] = self.base.usdc_balance(w["worker_base"])
            self.result.facts["buyer_usdc_solana"] = self.sol.usdc_balance(w["buyer_sol"])
            self.result.facts["usdc_decimals"] = {
                chain: self.decimals(chain, "USDC") for chain in ("solana-local", "base-local")
            }
        except Exception as exc:  # a crash is a deviation too: report it, exit non-zero
            self.check("demo", "—", "run", f"{type(exc).__name__}: {exc}"[:300], "no error", False)
        finally:
            with contextlib.suppress(Exception):
                await self.teardown()
            self.result.seconds = time.monotonic() - started
        return self.result


async def run_demo(workdir: Path, *, echo: Callable[[Row], None] | None = None) -> DemoResult:
    return await DemoWorld(workdir, echo).run()
