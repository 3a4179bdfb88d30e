"""A world of real processes (issue 27): the devnet (LiteSVM over JSON-RPC, anvil, the
garden), `worker serve` from `init --devnet`, `enforcer serve` with payments on both
chains, and leashed agents made by `agent create --devnet`, each driven through
`envelopay mcp` (stdio) by the official MCP client.

Every process is started the way a user starts it (`python -m envelopay.cli …`), on
ports the system picks, under one temporary directory; `World.stop` ends them all, also
after a failure. What the tests assert is read from outside each side: balances from the
chains' RPC, the worker's flows from `envelopay flows|show` with its config, the
agent's mail from `check_inbox`, payments from `check_payment_status`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]
ENVELOPAY = [sys.executable, "-m", "envelopay.cli"]
WORKER = "worker@garden.local"
PRICE = 250_000  # word_count's price in init's template, smallest USDC units
DEADLINE = 60.0  # seconds any one condition may take (a payment is final in a few)

PAYMENT_TOOLS = ("pay_invoice", "pay", "make_offer", "accept_offer", "prepaid_order")

T = TypeVar("T")


class NotYet(Exception):
    """A condition polled by `eventually` does not hold yet."""


def eventually(check: Callable[[], T], what: str, *, deadline: float = DEADLINE) -> T:
    """Poll `check` until it returns without NotYet (a condition, not a timing)."""
    end = time.monotonic() + deadline
    last = ""
    while True:
        try:
            return check()
        except NotYet as exc:
            last = str(exc)
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline:g} s ({last})")
        time.sleep(0.2)


@dataclass
class Agent:
    name: str
    address: str
    env: dict[str, str]  # what `agent create` printed, exported as a user's shell would
    wallets: dict[str, str]  # chain → the enforcer-held wallet


@dataclass
class Service:
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class World:
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    devnet: dict[str, Any] = field(default_factory=dict)  # devnet.json as written
    worker_wallets: dict[str, str] = field(default_factory=dict)
    services: list[Service] = field(default_factory=list)
    socket: Path = Path()
    started_devnet: bool = False
    agents: dict[str, Agent] = field(default_factory=dict)
    payments: list[tuple[str, str]] = field(default_factory=list)  # (agent, payment id) the cases made

    # -- processes -------------------------------------------------------------------

    def cli(self, *args: str, expect: int | None = 0, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*ENVELOPAY, *args], cwd=self.root, env=env or self.env, capture_output=True,
                              text=True, timeout=timeout)
        if expect is not None:
            assert done.returncode == expect, f"envelopay {' '.join(args)}: exit {done.returncode}\n" \
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done

    def cli_json(self, *args: str, expect: int | None = 0) -> dict[str, Any]:
        doc = json.loads(self.cli(*args, "--json", expect=expect).stdout)
        assert isinstance(doc, dict)
        return doc

    def service(self, name: str, *args: str, ready: str) -> Service:
        log = self.root / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen([*ENVELOPAY, *args], cwd=self.root, env=self.env, stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        svc = Service(proc, log)
        self.services.append(svc)

        def up() -> None:
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{svc.text()[-3000:]}")
            if ready not in svc.text():
                raise NotYet(f"{name} not {ready} yet")

        eventually(up, f"{name} ready", deadline=60)
        return svc

    def start(self) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ENVELOPAY_")}
        self.env.update(ENVELOPAY_DEVNET_HOME=str(self.root / "devnet"), ENVELOPAY_DEVNET_SOLANA_PORT="0",
                        ENVELOPAY_DEVNET_BASE_PORT="0", PYTHONUNBUFFERED="1", HOME=str(self.root))
        self.started_devnet = True
        # A slot every 0.1 s and a block every 0.5 s: the same waits as the default timing,
        # shorter (the worker and the enforcer wait for their commitment either way).
        self.cli("devnet", "up", "--detach", "--slot-time", "0.1", "--block-time", "0.5")
        self.devnet = json.loads((self.root / "devnet" / "devnet.json").read_text())
        init = self.cli_json("init", "--devnet", "--address", WORKER, "--dir", "worker")
        self.worker_wallets = dict(init["wallets"])
        with (self.root / "worker" / "envelopay.toml").open("a") as cfg:
            # The worker trades USDC on one chain for USDC on the other, one for one (make_offer).
            for give, want in (("solana-local", "base-local"), ("base-local", "solana-local")):
                cfg.write(f'\n[[exchange]]\ngive = "{give}/USDC"\nwant = "{want}/USDC"\n'
                          'give_unit = "1"\nwant_per_unit = "1"\nmax_want = "5000000"\n')
        self.service("worker", "worker", "serve", "-c", "worker/envelopay.toml", ready="serving")
        self.start_enforcer()

    def start_enforcer(self) -> None:
        home = self.root / "devnet"
        # The garden admits the enforcer as a sender; `agent create --devnet` adds each agent.
        secret = self.cli_json("garden", "account", "enforcer", "-a", "nobody@garden.local",
                               "--accounts", str(home / "garden-accounts.json"))["secret"]
        self.env["ENVELOPAY_GARDEN_SECRET"] = secret
        vault = self.root / "vault.key"
        vault.write_bytes(os.urandom(32).hex().encode())
        vault.chmod(0o600)
        self.socket = self.root / "spend.sock"
        self.service("enforcer", "enforcer", "serve", "--db", f"sqlite:///{self.root / 'spend.db'}",
                     "--socket", str(self.socket), "--garden", str(home / "garden.sock"),
                     "--operator-token-file", str(self.root / "operator.token"),
                     "--vault-key-file", str(vault),
                     "--pay-rail", f"solana-local={self.devnet['solana']['rpc_url']}",
                     "--pay-rail", f"base-local={self.devnet['base']['rpc_url']}",
                     "--inbox-root", str(home / "garden"), "--dkim-dns", "devnet", ready="listening")
        self.env["ENVELOPAY_ENFORCER"] = str(self.socket)
        self.env["ENVELOPAY_OPERATOR_TOKEN_FILE"] = str(self.root / "operator.token")

    def stop(self) -> None:
        for svc in reversed(self.services):
            _end(svc.proc)
        if self.started_devnet:
            self.cli("devnet", "down", expect=None, timeout=60)
            with contextlib.suppress(OSError, ValueError, KeyError):  # still there: end it for good
                pid = int(json.loads((self.root / "devnet" / "devnet.json").read_text())["pid"])
                os.killpg(pid, signal.SIGKILL)

    # -- agents ----------------------------------------------------------------------

    def create_agent(self, name: str, *options: str, usdc: str | None = "20") -> Agent:
        """`agent create --devnet`, its `export` lines run by bash as a user's `eval` does,
        then its wallets funded by the devnet's faucet (`envelopay fund ADDRESS`)."""
        address = f"{name}@garden.local"
        argv = " ".join(["agent", "create", name, "--address", address, "--devnet", "--allow", "garden.local",
                         "--hourly", "500", "--daily", "5000", "--wallet", "solana-local=new",
                         "--wallet", "base-local=new", *options])
        # Run by bash as a user's shell runs it: the operator names the socket relative to
        # the enforcer's folder (as README does), the agent's shell evals the `export` lines
        # in another folder: what was printed must work from anywhere.
        elsewhere = self.root / "agent-shell"
        elsewhere.mkdir(exist_ok=True)
        script = (f'out=$(ENVELOPAY_ENFORCER={self.socket.name} {" ".join(ENVELOPAY)} {argv}) && '
                  f'cd {elsewhere} && eval "$(echo "$out" | grep ^export)" && echo "$out" | grep ^wallet; '
                  'env | grep ^ENVELOPAY_AGENT_; echo ENVELOPAY_ENFORCER=$ENVELOPAY_ENFORCER')
        done = subprocess.run(["bash", "-c", script], cwd=self.root, env=self.env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        env = dict(line.split("=", 1) for line in lines if line.startswith("ENVELOPAY_"))
        wanted = {"ENVELOPAY_AGENT_TOKEN", "ENVELOPAY_AGENT_ADDRESS", "ENVELOPAY_AGENT_MAILDIR"}
        assert wanted <= env.keys(), env
        assert Path(env["ENVELOPAY_ENFORCER"]).is_absolute(), env
        wallets = dict(line.split()[1:3] for line in lines if line.startswith("wallet "))  # chain address
        assert wallets.keys() == {"solana-local", "base-local"}, lines
        if usdc is not None:  # None: its wallets stay empty, as after a devnet restart
            self.cli("fund", address, "--sol", "1", "--eth", "1", "--usdc", usdc)
        self.agents[name] = Agent(name, address, env, wallets)
        return self.agents[name]

    @contextlib.asynccontextmanager
    async def mcp(self, agent: Agent) -> AsyncIterator[Mcp]:
        keep = {k: v for k, v in self.env.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        params = StdioServerParameters(command=sys.executable, args=["-m", "envelopay.cli", "mcp"],
                                       env={**keep, **agent.env}, cwd=str(self.root / "agent-shell"))
        try:
            async with Client(params, read_timeout_seconds=120) as client:
                session = Mcp(client, lambda pid: self.payments.append((agent.name, pid)))
                await session.mark()
                yield session
        except BaseExceptionGroup as group:  # the client's task groups wrap what the test raised
            raise _leaf(group) from None

    # -- what the chains, the worker and the enforcer say ----------------------------

    def usdc(self, chain: str, wallet: str) -> int:
        """The wallet's USDC balance, read from the chain's RPC (no side's own account)."""
        if chain == "solana-local":
            return _solana_usdc(self.devnet["solana"]["rpc_url"], wallet)
        return _base_usdc(self.devnet["base"]["rpc_url"], self.devnet["base"]["usdc"], wallet)

    # The worker's ledger, read by the functions `envelopay flows|show --json -c
    # worker/envelopay.toml` run, in this process: the same documents, without a Python
    # start per look (seconds each on a loaded CI machine). test_worker_ledger_as_the_cli_reads_it
    # holds the two equal.

    def worker_flows(self) -> dict[str, dict[str, Any]]:
        from envelopay.client import commands, views
        from envelopay.config import load_config

        cfg = load_config(self.root / "worker" / "envelopay.toml")
        rows, _ = commands.flows(cfg, 10_000)
        jobs = commands.job_states(cfg, [r.flow_id for r in rows])  # as `envelopay flows` says them
        return {f["id"]: f for f in views.flows_doc(cfg.agent.address, rows, jobs=jobs)["flows"]}

    def worker_show(self, flow_id: str) -> dict[str, Any]:
        from envelopay.client import commands, views
        from envelopay.config import load_config

        cfg = load_config(self.root / "worker" / "envelopay.toml")
        rec, log = commands.flow_thread(cfg, flow_id)
        return views.show_doc(rec, log, commands.job_states(cfg, [flow_id]).get(flow_id))

    def approve(self, approval_id: str) -> dict[str, Any]:
        return self.cli_json("approvals", "approve", approval_id)


class Mcp:
    """One agent's MCP session: tools called as an MCP host calls them."""

    def __init__(self, client: Client, made: Callable[[str], None]) -> None:
        self.client = client
        self.made = made  # told each payment id a payment tool returns
        self.seen: set[str] = set()  # check_inbox keys there before this case began

    async def mark(self) -> None:
        """From now on, `new_mail` and `wait_mail` see only what arrives after this."""
        self.seen = {m["key"] for m in await self.inbox()}

    async def new_mail(self) -> list[dict[str, Any]]:
        return [m for m in await self.inbox() if m["key"] not in self.seen]

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(tool, args)
        assert not result.is_error, f"{tool}: {result.content}"
        data = result.structured_content
        assert isinstance(data, dict), result
        if tool in PAYMENT_TOOLS and data.get("id"):
            self.made(str(data["id"]))
        return data

    async def tools(self) -> set[str]:
        return {t.name for t in (await self.client.list_tools()).tools}

    async def inbox(self) -> list[dict[str, Any]]:
        return list((await self.call("check_inbox", {"limit": 200}))["messages"])

    async def wait_mail(self, what: str, match: Callable[[dict[str, Any]], bool],
                        deadline: float = DEADLINE) -> dict[str, Any]:
        """The first message in check_inbox that `match` takes, polled until it comes."""
        import asyncio

        end = time.monotonic() + deadline
        while True:
            for m in await self.new_mail():
                if match(m):
                    return m
            if time.monotonic() > end:
                seen = [(m.get("type"), m.get("body", {}).get("id")) for m in await self.new_mail()]
                raise AssertionError(f"{what}: not in check_inbox within {deadline:g} s; seen {seen}")
            await asyncio.sleep(0.2)

    async def settle(self, disposition: dict[str, Any], deadline: float = DEADLINE) -> dict[str, Any]:
        """check_payment_status until the payment is out of flight (`unknown` is in flight)."""
        import asyncio

        end = time.monotonic() + deadline
        d = disposition
        while d["status"] == "unknown" and d.get("id"):
            if time.monotonic() > end:
                raise AssertionError(f"payment {d['id']} still unknown after {deadline:g} s: {d}")
            await asyncio.sleep(0.3)
            d = await self.call("check_payment_status", {"id": d["id"]})
        return d


    async def wait_status(self, payment_id: str, status: str, deadline: float = DEADLINE) -> dict[str, Any]:
        """check_payment_status until it says `status` (e.g. the payee's OOPS heard)."""
        import asyncio

        end = time.monotonic() + deadline
        while True:
            d = await self.call("check_payment_status", {"id": payment_id})
            if d["status"] == status:
                return d
            if time.monotonic() > end:
                raise AssertionError(f"payment {payment_id}: {d}, not {status} within {deadline:g} s")
            await asyncio.sleep(0.3)


def ref_is(kind: str, field_name: str, value: str) -> Callable[[dict[str, Any]], bool]:
    """A check_inbox entry of type `kind` whose body's `field_name` is `value`."""
    return lambda m: m.get("type") == kind and (m.get("body") or {}).get(field_name) == value


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _leaf(first) if isinstance(first, BaseExceptionGroup) else first


def _end(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _rpc(url: str, method: str, params: list[Any]) -> Any:
    doc = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                     timeout=10).json()
    if "error" in doc:
        raise LookupError(doc["error"])
    return doc["result"]


def _solana_usdc(url: str, wallet: str) -> int:
    from solders.pubkey import Pubkey
    from spl.token.instructions import get_associated_token_address

    from envelopay_solana.assets import LOCAL_USDC_MINT

    account = get_associated_token_address(Pubkey.from_string(wallet), Pubkey.from_string(LOCAL_USDC_MINT))
    try:
        doc = _rpc(url, "getTokenAccountBalance", [str(account), {"commitment": "confirmed"}])
    except LookupError:
        return 0  # no token account yet: nothing was ever paid to it
    return int(doc["value"]["amount"])


def _base_usdc(url: str, token: str, wallet: str) -> int:
    data = "0x70a08231" + wallet.lower().removeprefix("0x").rjust(64, "0")  # balanceOf(address)
    return int(_rpc(url, "eth_call", [{"to": token, "data": data}, "latest"]), 16)


@contextlib.contextmanager
def running_world(root: Path) -> Iterator[World]:
    world = World(root)
    try:
        world.start()
        yield world
    finally:
        world.stop()
