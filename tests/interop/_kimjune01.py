"""A test-side model of the protocol author's implementation (kimjune01/envelopay),
written in our own words from fixtures/interop/kimjune01/README.md and shapes.json:
how it reads a mail (AgentMail's `subject`/`text`), how it routes and extracts JSON,
what each of its workers answers, and the mail AgentMail makes of those answers.

Nothing here is their code: it is the behaviour those fixtures describe, so our
engine can be run against it both ways (tests/interop/test_kimjune01.py).
"""

from __future__ import annotations

import email
import itertools
import json
import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

SHAPES: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "fixtures" / "interop" / "kimjune01" / "shapes.json").read_text(
        encoding="utf-8"
    )
)
_RE = re.compile(r"^(Re:\s*)+", re.IGNORECASE)
_mid = itertools.count(1)


# ------------------------------------------------------------------ AgentMail, as their code sees it


@dataclass(frozen=True)
class Inbound:
    """The AgentMail message fields their code reads (README "Transport")."""

    subject: str
    from_: str
    text: str
    message_id: str
    references: tuple[str, ...] = ()


def receive(raw: bytes) -> Inbound:
    """What AgentMail hands their code for one delivered mail: the decoded subject,
    the sender, and `text`, the text/plain body (https://docs.agentmail.to/messages)."""
    msg = email.message_from_bytes(raw, policy=policy.default)
    text = ""
    for part in msg.walk():
        if part.get_content_type() == "text/plain" and part.get_content_disposition() != "attachment":
            text = str(part.get_content())  # type: ignore[attr-defined]
            break
    refs = tuple(str(msg.get("References", "")).split())
    return Inbound(
        subject=str(msg.get("Subject", "")),
        from_=email.utils.parseaddr(str(msg.get("From", "")))[1],
        text=text,
        message_id=str(msg.get("Message-ID", "")),
        references=refs,
    )


def _mail(
    frm: str, to: str, subject: str, text: str, headers: dict[str, str], parent: Inbound | None
) -> bytes:
    msg = EmailMessage(policy=policy.SMTP)
    msg["From"] = frm
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = "Mon, 30 Nov 2026 12:00:00 +0000"
    msg["Message-ID"] = f"<am{next(_mid)}@agentmail.test>"
    if parent is not None:
        msg["In-Reply-To"] = parent.message_id
        msg["References"] = " ".join((*parent.references, parent.message_id))
    for name, value in headers.items():
        msg[name] = value
    msg.set_content(text)
    return msg.as_bytes()


def reply(parent: Inbound, inbox: str, subject: str, body: dict[str, Any]) -> bytes:
    """A reply through AgentMail's reply endpoint: no subject of its own, so the mail
    is `Re: <parent subject>`; the text is `TYPE | note`, a blank line and the JSON
    pretty-printed (shapes.json transport.reply)."""
    text = f"{subject}\n\n{json.dumps(body, indent=2)}"
    kind = subject.split("|", 1)[0].strip()
    return _mail(inbox, parent.from_, f"Re: {parent.subject}", text, {"X-Envelopay-Type": kind}, parent)


def thread_reply(parent: Inbound, inbox: str, subject: str, body: dict[str, Any]) -> bytes:
    """The demo's SDK call `threads.reply(text=, subject=, headers=)`: threaded, with
    the subject it passes (as the spec's own reply example does), text = pretty JSON."""
    kind = subject.split("|", 1)[0].strip()
    return _mail(inbox, parent.from_, subject, json.dumps(body, indent=2), {"X-Envelopay-Type": kind}, parent)


def send_new(inbox: str, to: str, subject: str, text: str) -> bytes:
    """A new message (send endpoint): the subject as asked, no threading."""
    kind = subject.split("|", 1)[0].strip()
    return _mail(inbox, to, subject, text, {"X-Envelopay-Type": kind}, None)


# ------------------------------------------------------------------ routing and extraction


def route(component: str, subject: str) -> str | None:
    """The type their `component` routes a subject to (shapes.json routing)."""
    rule = SHAPES["routing"][component]
    stripped = _RE.sub("", subject.strip()).strip()
    if component == "demo":
        exact = stripped.upper()
        return exact if exact in rule["exact"] else "OTHER"
    flags = re.IGNORECASE if rule.get("ignore_case") else 0
    m = re.match(rule["pattern"], stripped, flags)
    return m.group(1).upper() if m else None


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _first_brace_line(text: str) -> dict[str, Any] | None:
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("{"):
            found = _loads(line)
            if found is not None:
                return found
    return None


def extract(rule: str, text: str) -> dict[str, Any]:
    """One of their three JSON extraction rules (shapes.json extraction)."""
    if rule == "whole_only":
        return _loads(text.strip()) or {}
    if rule == "whole_then_line":
        return _loads(text.strip()) or _first_brace_line(text) or {}
    if rule == "line_then_whole":
        return _first_brace_line(text) or _loads(text.strip()) or {}
    raise ValueError(rule)


def _body(shape_name: str, **fill: str) -> tuple[str, dict[str, Any]]:
    shape = SHAPES["sends"][shape_name]
    text = json.dumps(shape["body"])
    subject = shape["subject"]
    for key, value in fill.items():
        text = text.replace("{" + key + "}", value)
        subject = subject.replace("{" + key + "}", value)
    return subject, json.loads(text)


# ------------------------------------------------------------------ their workers


@dataclass
class Exchange:
    """exchange/ behind its webhook entry point (README "Shapes it sends")."""

    inbox: str = "axiomatic@agentmail.test"
    known_txs: set[str] = field(default_factory=set)
    pending: list[dict[str, Any]] = field(default_factory=list)
    donations: list[dict[str, Any]] = field(default_factory=list)
    operator: list[str] = field(default_factory=list)

    def handle(self, raw: bytes) -> list[bytes]:
        m = receive(raw)
        kind = route("exchange", m.subject)
        body = extract("whole_then_line", m.text)
        if kind == "WHICH":
            subject, methods = _body("exchange.methods")
            return [reply(m, self.inbox, subject, methods)]
        if kind == "ORDER":
            stripped = _RE.sub("", m.subject).strip()
            item = stripped.split("|", 1)[1].strip().rsplit(",", 1)[0].strip() if "|" in stripped else ""
            item = item or "Digital Product"
            subject, ful = _body("exchange.fulfill", item=item, slug=item.lower().replace(" ", "-"))
            ful["order_ref"] = body.get("id", "")
            return [reply(m, self.inbox, subject, ful)]
        if kind == "PAY":
            proof = body.get("proof", {})
            tx = proof.get("tx", "") if isinstance(proof, dict) else ""
            if not tx:
                subject, oops = _body("exchange.oops_missing_proof")
            elif tx not in self.known_txs:
                subject, oops = _body("exchange.oops_tx_not_found", tx=tx)
            else:
                self.donations.append(body)
                subject, oops = _body("exchange.oops_thanks")
            return [reply(m, self.inbox, subject, oops)]
        if kind == "OFFER":
            give = body.get("give", {})
            wallet = body.get("wallet", "")
            if isinstance(give, dict) and str(give.get("amount", "0")).isdigit() and 32 <= len(wallet) <= 44:
                self.pending.append(
                    {
                        "row": len(self.pending) + 1,
                        "cents": int(give["amount"]),
                        "wallet": wallet,
                        "parent": m,
                    }
                )
            return []  # silence until a payment notice matches (exchange/offer.py:101)
        if kind == "INVOICE":
            self.operator.append(
                f"INVOICE from {m.from_}: {body.get('amount', '?')} {body.get('token', '?')}"
            )
            return []  # forwarded to the operator, never answered to the sender
        return []

    def payment_notice(self, cents: int, sol_tx: str, lamports: int) -> list[bytes]:
        """The operator forwards a "paid you $N" notice; a pending OFFER that it covers
        gets an ACCEPT whose offer_ref is the ledger row (exchange/match.py:63-70)."""
        for row in self.pending:
            if cents >= row["cents"]:
                self.pending.remove(row)
                subject, acc = _body("exchange.accept", lamports=str(lamports), wallet=row["wallet"])
                acc.update(offer_ref=str(row["row"]), amount=str(lamports), proof={"tx": sol_tx})
                return [reply(row["parent"], self.inbox, subject, acc)]
        return []


@dataclass
class Shop:
    """shop/shop.py: new messages, never replies; whole-text JSON only."""

    inbox: str = "shop@agentmail.test"
    catalog: tuple[str, ...] = ("example-template",)

    def handle(self, raw: bytes) -> list[bytes]:
        m = receive(raw)
        kind = route("shop", m.subject)
        if kind == "WHICH":
            subject, methods = _body("shop.methods")
            return [send_new(self.inbox, m.from_, subject, json.dumps(methods, indent=2))]
        if kind == "ORDER":
            stripped = _RE.sub("", m.subject).strip()
            name = stripped.split("|", 1)[1].strip().rsplit(",", 1)[0].strip() if "|" in stripped else ""
            slug = name.lower().replace(" ", "-")
            if slug not in self.catalog:
                oops = {
                    "v": "0.1.0",
                    "type": "oops",
                    "note": f"Unknown product: {name}",
                    "error": {"code": "item_not_found"},
                }
                return [
                    send_new(
                        self.inbox, m.from_, f"OOPS | Unknown product: {name}", json.dumps(oops, indent=2)
                    )
                ]
            body = extract("whole_only", m.text)
            subject, ful = _body("shop.fulfill", name=name, file_url="https://example.test/d.zip")
            ful["order_ref"] = body.get("id", "")
            return [send_new(self.inbox, m.from_, subject, json.dumps(ful, indent=2))]
        return []


@dataclass
class Demo:
    """demo/webhook_handler.py: exact WHICH → METHODS; everything else → INVOICE."""

    inbox: str = "demo@agentmail.test"

    def handle(self, raw: bytes) -> list[bytes]:
        m = receive(raw)
        kind = route("demo", m.subject)
        if kind == "WHICH":
            subject, methods = _body("demo.methods")
            return [thread_reply(m, self.inbox, subject, methods)]
        if kind == "INVOICE":
            return []  # would refund on Solana mainnet; its FULFILL then carries no order_ref
        body = extract("line_then_whole", m.text)
        task = body.get("task")
        desc = task.get("description", "") if isinstance(task, dict) else body.get("note", m.subject)
        subject, inv = _body("demo.invoice", task=str(desc))
        if body.get("id"):
            inv["order_ref"] = body["id"]
        else:
            del inv["order_ref"]
        return [thread_reply(m, self.inbox, subject, inv)]


# ------------------------------------------------------------------ their buyer side


def read_reply(raw: bytes) -> tuple[str | None, dict[str, Any]]:
    """What exchange/handler.py makes of a reply it receives: the routed type and the
    fields its inbound handler reads (exchange/inbound.py)."""
    m = receive(raw)
    return route("exchange", m.subject), extract("whole_then_line", m.text)


def request(to: str, subject: str, body: dict[str, Any], *, frm: str = "axiomatic@agentmail.test") -> bytes:
    """A new request as their code writes one (mailroom Context.reply without a
    message id: the subject, and the text `subject\\n\\n{pretty JSON}`)."""
    return send_new(frm, to, subject, f"{subject}\n\n{json.dumps(body, indent=2)}")


def spec_which(to: str, *, frm: str = "axiomatic@agentmail.test") -> bytes:
    """The spec's own AgentMail example: the compact JSON as the whole text."""
    shape = SHAPES["buyer_requests"]["spec_example.which"]
    return send_new(frm, to, shape["subject"], shape["text"])
