"""The client role behind the CLI: build a message from fields, refuse bad input
before any I/O, pay on the rail first where the protocol says so, send through the
engine (so the flow is tracked), and optionally follow the flow until the answer.

Every `build_*` function validates and returns a message or raises UsageError naming
the field; nothing is paid or sent until the message is known to be valid.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from envelopay.engine import BaseApplication, Notice, Outcome, Sent
from envelopay.errors import RailError, UsageError
from envelopay.mail.addresses import require_address
from envelopay.node.agent_node import AgentNode
from envelopay.protocol import outside_json
from envelopay.protocol.fields import wanted
from envelopay.protocol.messages import Message, MessageType, Wait, Whatsup, model_for
from envelopay.protocol.status import state_line
from envelopay.rails.finality import progress_text, wait_final
from envelopay.rails.interface import Expectation, Rail
from envelopay.rails.registry import judge_terms

PROGRESS_EVERY = 5  # seconds between two "waiting ... s left" lines

__all__ = ["Answer", "ClientApp", "build", "check_address", "follow", "judge", "parse_json_option",
           "pay_first"]


class ClientApp(BaseApplication):
    """The CLI's application: it receives on its configured wallets and records notices."""

    def __init__(self, wallets: Mapping[tuple[str, str], str]) -> None:
        self.wallets = dict(wallets)
        self.notices: list[Notice] = []
        self.arrived = asyncio.Event()

    def wallet(self, chain: str, token: str) -> str | None:
        return self.wallets.get((chain, token))

    async def notify(self, notice: Notice) -> None:
        self.notices.append(notice)
        self.arrived.set()


def parse_json_option(value: str | None, field: str) -> Any:
    """A JSON option's value (--task, --result, --request): too deep, a number past the
    digit limit, a lone surrogate → UsageError naming the option (protocol.outside_json)."""
    if value is None:
        return None
    try:
        return outside_json.loads(value)
    except outside_json.OutsideJsonError as exc:
        raise UsageError(f"{field}: {exc}") from exc


def build(model: type[Message], field_prefix: str = "", **fields: Any) -> Message:
    """Validate fields into a message model; a bad field → UsageError naming it."""
    clean = {k: v for k, v in fields.items() if v is not None}
    # Text no mail or ledger row can hold (a lone surrogate: bytes argv could not decode,
    # "\ud800" in JSON) is refused here, before the flow and outbox rows are written.
    problem = outside_json.value_problem(clean, outside_json.MAX_DEPTH + 1)
    if problem is not None:
        raise UsageError(f"--{field_prefix}{_option_path(problem.path.split('.'))}: {problem}")
    try:
        return model.model_validate(clean, strict=False)
    except ValidationError as exc:
        err = exc.errors()[0]
        # Drop pydantic's union tags ("dict[str,any]", "function-after[...]") from the path.
        loc = [str(x) for x in err["loc"] if isinstance(x, int) or ("[" not in str(x) and str(x) != "str")]
        raise UsageError(f"--{field_prefix}{_option_path(loc) or model.__name__.lower()}: "
                         f"{wanted(err)}") from exc


def _option_path(loc: list[str]) -> str:
    """The option a field came from: the OFFER's legs from flags (--give-amount), JSON
    options keep their path (--task.text)."""
    where = ("-" if loc and loc[0] in _FLAG_GROUPS else ".").join(x for x in loc if x)
    return where.replace("_", "-")


_FLAG_GROUPS = ("give", "want")


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back to a sent message within the wait."""

    message: Message | None
    outcome: Outcome | None
    timed_out: bool = False
    # The WAITs that came first (the status extension): the job's states as they changed.
    waits: tuple[Wait, ...] = ()
    # The last of them said `held`: the work failed and waits for the worker's operator
    # (refund or retry), so no answer comes until a person acts; the wait ends there.
    held: bool = False


def check_address(value: str) -> str:
    return require_address(value, field="ADDRESS").lower()


FINAL_WAIT = 120.0  # seconds pay_first waits for its own transaction to be final


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _option_of(message: str, prefix: str, wallet: str) -> str:
    """The option a rail's complaint is about (the rail speaks of tokens, amounts, recipients)."""
    text = message.lower()
    for word, option in (("token", "token"), ("amount", "amount"), ("recipient", wallet),
                         ("address", wallet), ("wallet", wallet)):
        if word in text:
            return f"--{prefix}{option}" if option != wallet else f"--{wallet}"
    return f"--{prefix}chain"


def judge(
    rails: Mapping[str, Rail], *, chain: str, token: str, amount: int | None = None,
    wallet: str | None = None, prefix: str = "", wallet_option: str = "wallet",
    done: str = "nothing was sent",
) -> None:
    """The asset registry and the rail's address syntax judge (chain, token, amount,
    wallet) before anything is paid or sent (rails.registry.judge_terms); a problem is a
    UsageError naming its option (`--give-chain`, `--wallet`, ...)."""
    problem = judge_terms(rails, chain, token, amount=amount, wallet=wallet)
    if problem is not None:
        option = wallet_option if problem.part == "wallet" else f"{prefix}{problem.part}"
        raise UsageError(f"--{option}: {problem.detail}; {done}")


async def pay_first(
    node: AgentNode, *, chain: str, token: str, amount: int, recipient: str, prefix: str = "",
    wallet_option: str = "wallet", final_wait: float = FINAL_WAIT,
    progress: Callable[[str], Any] = _stderr, made: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Move the money before the mail is composed (spec: "Settlement model"), then wait
    until our own transaction is final by the rule the counterparty applies by default
    (Solana `confirmed`, EVM 2 confirmations), showing progress, so the proof we send
    is one it can accept at once. `final_wait=0` sends as soon as the chain took it.
    A rail's refusal of the input names the option (`--token`, `--give-amount`, `--wallet`, ...).
    `made`: the proof of a transaction already made (`pay --proof`, after a payment that
    may still have landed): nothing is paid, the proof is checked as our own would be."""
    judge(node.rails, chain=chain, token=token, amount=amount, wallet=recipient, prefix=prefix,
          wallet_option=wallet_option, done="nothing was paid")
    rail = node.rails[chain]
    if made is not None:
        try:
            rail.proof_key(made)  # a proof of this rail's shape, or ValueError
        except ValueError as exc:
            raise UsageError(f"--proof: not a {chain} proof ({exc}); nothing was sent") from exc
    try:
        proof = made if made is not None else await rail.pay(chain=chain, token=token, amount=amount,
                                                              recipient=recipient)
    except UsageError as exc:
        raise UsageError(f"{_option_of(str(exc), prefix, wallet_option)}: {exc} (on {chain}); "
                         "nothing was paid") from exc
    except RailError as exc:
        # The environment's fault (funds, RPC), not the input's: CLI exit 3.
        if (left := exc.may_land()) is not None:
            # The transaction left and may land: saying "failed" would have the payer pay
            # again. What to look at instead, and that no mail went.
            tx = (exc.sent or {}).get("tx")
            raise RailError(exc.reason, f"payment on {chain}: {left}. Nothing was mailed; `envelopay verify "
                            f"--chain {chain} --token {token} --amount {amount} --to {recipient} --tx {tx} "
                            "--rpc URL` (the rail's rpc_url) shows when it is final", sent=exc.sent) from exc
        raise RailError(exc.reason, f"payment on {chain} failed: {exc.detail or exc.reason}; "
                        "nothing was sent") from exc
    if final_wait <= 0:
        return proof
    expectation = Expectation(chain=chain, token=token, amount=amount, recipient=recipient)
    verdict = await wait_final(rail, proof, expectation, timeout=final_wait,
                               progress=lambda line: progress(f"waiting for {chain}: {line}"))
    if verdict.status == "rejected":
        raise UsageError(f"our payment on {chain} is not one the payee can accept ({verdict.reason}: "
                         f"{verdict.detail}); proof {proof}; nothing was sent")
    if verdict.ok:
        progress(f"{chain}: final ({progress_text(verdict, expectation)})")
    else:  # still not final: send anyway, the payee waits for it too
        progress(f"{chain}: not final after {final_wait:g}s ({verdict.detail}); sending the proof")
    return proof


async def follow(
    node: AgentNode,
    sent: Sent,
    *,
    timeout: float,
    progress: Callable[[str], None] = lambda _: None,
) -> Answer:
    """Serve our Maildir until an answer in this flow arrives (or `timeout`). A WAIT is
    no answer (SPEC.md "Status while working"): it is told to `progress` and kept, and the
    wait goes on for the FULFILL or OOPS; it is the answer only to our WHATSUP. A WAIT
    `held` ends the wait (`Answer.held`): only the worker's operator moves that job on."""
    stop = asyncio.Event()
    cursor = node.received
    task = asyncio.create_task(node.serve(stop))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    said = -1
    waits: list[Wait] = []
    asked = sent.outbound.message.id if isinstance(sent.outbound.message, Whatsup) else None
    try:
        while loop.time() < deadline:
            left = int(deadline - loop.time())
            if said < 0 or said - left >= PROGRESS_EVERY:
                said = left
                progress(f"waiting for the answer to {sent.outbound.message.type.upper()} {sent.message_id} "
                         f"(flow {sent.flow_id}): {left} s left")
            for outcome in node.outcomes_since(cursor):
                # waiting: its proof is not final yet; the answer is the step after it.
                if outcome.flow_id == sent.flow_id and outcome.status != "waiting":
                    msg = _inbound(node, outcome)
                    if isinstance(msg, Wait) and (asked is None or msg.ref != asked):
                        waits.append(msg)
                        progress(f"job {state_line(msg)} (flow {sent.flow_id})")
                        if msg.state == "held" and asked is None:  # a WHATSUP waits for its own
                            return Answer(None, outcome, waits=tuple(waits), held=True)
                        continue
                    return Answer(msg, outcome, waits=tuple(waits))
            cursor = node.received
            if task.done():
                task.result()  # surface a crashed pump
            await asyncio.sleep(0.05)
        return Answer(None, None, timed_out=True, waits=tuple(waits))
    finally:
        stop.set()
        await task


def _inbound(node: AgentNode, outcome: Outcome) -> Message | None:
    if outcome.flow_id is None or outcome.message_id is None:
        return None
    for entry in reversed(node.store.flow_log(outcome.flow_id)):
        if entry.direction == "in" and entry.message_id == outcome.message_id and entry.body is not None:
            try:
                model = model_for(MessageType(entry.type))
                return model.model_validate(dict(entry.body), strict=False)  # type: ignore[return-value]
            except (ValueError, ValidationError):
                return None
    return None

