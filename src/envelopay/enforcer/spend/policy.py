"""The pure half of the spend policy: limits per asset, allowed payees, the payment
request's shape, and the ordered non-consuming spend checks. No I/O here;
`payments.Payments` runs these around its store reads and its conditional cap writes.

Order (issue 14, cheapest and most terminal first; nothing is consumed until the payment
is otherwise allowed):
  S1 the asset is known to the rail's registry (chain + token)        → blocked
  S2 the payee is allowed: address or domain, then the wallet allowlist → pending_approval
  S3 the per-payment maximum for that asset                           → pending_approval
  S4 invoice binding (pay_invoice; every other route under require_invoice) → blocked
  S5 hourly, then daily spend cap (conditional increments)            → pending_approval
Invoice binding runs before the caps (the issue lists it last) because it refuses
outright and consumes nothing: a cap is the only check with a side effect, so it runs last.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from envelopay.enforcer.send.policy import allowlisted, valid_address

__all__ = [
    "PaymentKind",
    "PaymentRequest",
    "Refusal",
    "SpendLimit",
    "SpendPolicy",
    "asset_key",
    "check_limits",
    "check_payee",
    "check_payment_request",
    "check_route",
    "format_spend",
    "parse_spend",
]

# "counter": a payment leg whose email the caller sends itself through the send path (the
# worker's OFFER counter-leg: its engine composes the ACCEPT). Same spend checks; no mail leg.
# "order": a v0.2 prepaid ORDER, its proof in the ORDER itself (SPEC "Prepaid ORDER").
PaymentKind = Literal["pay", "pay_invoice", "offer", "accept", "counter", "order"]
KINDS: tuple[PaymentKind, ...] = ("pay", "pay_invoice", "offer", "accept", "counter", "order")
# Idempotency keys the enforcer derives itself (decide.call_key, invoices.BoundInvoice):
# an agent's own key may not start with one, so the two kinds of key never meet.
RESERVED_KEY_PREFIXES = ("invoice:", "id:")
_MAX_TASK = 16_384  # characters of a prepaid ORDER's task, as JSON
MAX_AMOUNT = 2**63 - 1  # both ledgers keep counters as signed 64-bit integers

_IDENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_LIMIT_ITEM = re.compile(r"\s*([0-9]+)\s*/\s*(payment|hour|day)\s*")  # ASCII digits, as amounts
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]*")
_DOMAIN = re.compile(
    r"@?[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
    r"[A-Za-z0-9])?)+"
)


def asset_key(chain: str, token: str) -> str:
    return f"{chain.strip().lower()}/{token.strip().upper()}"


@dataclass(frozen=True, slots=True)
class SpendLimit:
    """Smallest units. None = no such limit; 0 = every payment is held for approval."""

    per_payment: int | None = None
    hourly: int | None = None
    daily: int | None = None

    def to_json(self) -> dict[str, int]:
        out = {"per_payment": self.per_payment, "hourly": self.hourly, "daily": self.daily}
        return {k: v for k, v in out.items() if v is not None}


@dataclass(frozen=True, slots=True)
class SpendPolicy:
    """A new agent starts with no limits at all: every payment is held for approval."""

    limits: Mapping[str, SpendLimit] = field(default_factory=dict)  # asset_key → limit
    payees: tuple[str, ...] = ()  # exact addresses and domains, as the mail allowlist
    wallets: tuple[str, ...] = ()  # payee wallet allowlist; empty = any wallet
    require_invoice: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "limits": {k: v.to_json() for k, v in sorted(self.limits.items())},
            "payees": list(self.payees),
            "wallets": list(self.wallets),
            "require_invoice": self.require_invoice,
        }

    @classmethod
    def from_json(cls, data: Any) -> SpendPolicy:
        """Raises ValueError with the offending field for anything malformed."""
        if not isinstance(data, Mapping):
            raise ValueError("a spend policy is a JSON object")
        limits_in = data.get("limits", {})
        if not isinstance(limits_in, Mapping):
            raise ValueError("limits: an object of asset → {per_payment, hourly, daily}")
        limits: dict[str, SpendLimit] = {}
        for key, spec in limits_in.items():
            chain, sep, token = str(key).partition("/")
            if not sep or not chain or not token:
                raise ValueError(f"limits: {key!r} is not chain/TOKEN")
            if not isinstance(spec, Mapping):
                raise ValueError(f"limits.{key}: an object")
            values = {}
            for name in ("per_payment", "hourly", "daily"):
                v = spec.get(name)
                if v is not None and (
                    not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_AMOUNT
                ):
                    raise ValueError(f"limits.{key}.{name}: a non-negative integer in smallest units")
                values[name] = v
            limits[asset_key(chain, token)] = SpendLimit(**values)
        payees = _strings(data.get("payees", []), "payees")
        for p in payees:
            if not (valid_address(p) or _DOMAIN.fullmatch(p)):
                raise ValueError(f"payees: {p!r} is neither an address nor a domain")
        wallets = _strings(data.get("wallets", []), "wallets")
        require = data.get("require_invoice", False)
        if not isinstance(require, bool):
            raise ValueError("require_invoice: true or false")
        return cls(limits=limits, payees=payees, wallets=wallets, require_invoice=require)

    def with_limit(self, key: str, limit: SpendLimit) -> SpendPolicy:
        return replace(self, limits={**self.limits, key: limit})


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{name}: a list of strings")
    return tuple(v.strip() for v in value)


def parse_spend(text: str) -> tuple[str, SpendLimit]:
    """`solana/USDC=5000000/day,1000000/payment` → ("solana/USDC", limit). Windows:
    payment, hour, day; amounts in the asset's smallest units."""
    head, sep, items = text.partition("=")
    chain, slash, token = head.strip().partition("/")
    if not sep or not slash or not chain or not token or not items.strip():
        raise ValueError(f"--spend {text!r}: expected CHAIN/TOKEN=AMOUNT/WINDOW[,AMOUNT/WINDOW...]")
    found: dict[str, int] = {}
    for item in items.split(","):
        m = _LIMIT_ITEM.fullmatch(item)
        if m is None:
            raise ValueError(f"--spend {text!r}: {item.strip()!r} is not AMOUNT/payment|hour|day")
        amount, window = int(m.group(1)), m.group(2)
        if window in found:
            raise ValueError(f"--spend {text!r}: {window} given twice")
        if amount > MAX_AMOUNT:
            raise ValueError(f"--spend {text!r}: {amount} is too large")
        found[window] = amount
    return asset_key(chain, token), SpendLimit(found.get("payment"), found.get("hour"), found.get("day"))


def format_spend(key: str, limit: SpendLimit) -> str:
    parts = [
        f"{v}/{w}"
        for v, w in ((limit.daily, "day"), (limit.hourly, "hour"), (limit.per_payment, "payment"))
        if v is not None
    ]
    return f"{key}=" + ",".join(parts) if parts else f"{key}=(none)"


# -- the request --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Refusal:
    """A spend verdict that stops the payment: blocked, or held for approval."""

    status: Literal["blocked", "pending_approval"]
    code: str  # stable reason code (SPEC.md "Spend enforcer")
    detail: str = ""

    @property
    def reason(self) -> str:
        return f"{self.code}: {self.detail}" if self.detail else self.code


def _blocked(code: str, detail: str = "") -> Refusal:
    return Refusal("blocked", code, detail)


def _held(code: str, detail: str = "") -> Refusal:
    return Refusal("pending_approval", code, detail)


@dataclass(frozen=True, slots=True)
class PaymentRequest:
    """One pay-then-send call, validated. For pay_invoice only `invoice` and `key` come
    from the caller; chain, token, amount, wallet and payee come from the INVOICE."""

    kind: PaymentKind
    to: str = ""  # the payee's mail address: the PAY / OFFER / ACCEPT recipient
    chain: str = ""
    token: str = ""
    amount: int = 0
    wallet: str = ""  # the payee's wallet on `chain`
    key: str = ""  # idempotency key ("" → derived from the invoice, or refused)
    msg_id: str = ""  # the protocol message's `id` ("" → generated)
    invoice: str = ""  # pay_invoice: Message-ID or INVOICE id; pay: invoice_ref
    note: str | None = None
    offer_ref: str = ""  # accept
    want: Mapping[str, Any] | None = None  # offer: {amount, token, chain}
    receive_wallet: str = ""  # offer: our wallet for the want leg ("" → ours on want.chain)
    task: Any = None  # order: the task (a JSON object or text), as in any ORDER
    reply_to: str = ""  # the bound INVOICE's Message-ID: the PAY's In-Reply-To

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        for name in (
            "to",
            "chain",
            "token",
            "wallet",
            "key",
            "msg_id",
            "invoice",
            "note",
            "offer_ref",
            "receive_wallet",
        ):
            value = getattr(self, name)
            if value:
                out[name] = value
        if self.amount:
            out["amount"] = str(self.amount)
        if self.want is not None:
            out["want"] = dict(self.want)
        if self.task is not None:
            out["task"] = self.task
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PaymentRequest:
        return cls(
            kind=data["kind"],
            to=data.get("to", ""),
            chain=data.get("chain", ""),
            token=data.get("token", ""),
            amount=int(data.get("amount", 0)),
            wallet=data.get("wallet", ""),
            key=data.get("key", ""),
            msg_id=data.get("msg_id", ""),
            invoice=data.get("invoice", ""),
            note=data.get("note"),
            offer_ref=data.get("offer_ref", ""),
            want=data.get("want"),
            receive_wallet=data.get("receive_wallet", ""),
            task=data.get("task"),
        )


def _amount(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20:
        n = int(value)
    else:
        return None
    return n if 0 < n <= MAX_AMOUNT else None


def _ident(value: Any) -> bool:
    return isinstance(value, str) and bool(_IDENT.fullmatch(value))


def _short(value: Any, limit: int = 200) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and bool(_PRINTABLE.fullmatch(value))


def check_payment_request(kind: str, raw: Mapping[str, Any]) -> PaymentRequest | Refusal:
    """Shape before any I/O. Unknown keys (a forged agent id) are ignored."""
    if kind not in KINDS:
        return _blocked("invalid_request", f"unknown operation {kind!r}")
    common = _common_fields(raw)
    if isinstance(common, Refusal):
        return common
    if kind == "pay_invoice":
        return _pay_invoice_request(raw, common)
    base = _transfer(kind, raw, common)
    if isinstance(base, Refusal) or kind == "counter":
        return base
    return _leg_fields(kind, raw, base)


@dataclass(frozen=True, slots=True)
class _Common:
    key: str
    msg_id: str
    note: str | None


def _common_fields(raw: Mapping[str, Any]) -> _Common | Refusal:
    """What every operation may carry: its idempotency key, its message id, a note."""
    key = raw.get("idempotency_key", "")
    if key != "" and not _ident(key):
        return _blocked("invalid_request", "idempotency_key: 1-128 of A-Z a-z 0-9 . _ : @ -")
    if isinstance(key, str) and key.lower().startswith(RESERVED_KEY_PREFIXES):
        reserved = " or ".join(RESERVED_KEY_PREFIXES)
        detail = f"idempotency_key: keys starting {reserved} are the enforcer's own"
        return _blocked("invalid_request", detail)
    note = raw.get("note")
    if note is not None and not (isinstance(note, str) and len(note) <= 500 and _PRINTABLE.fullmatch(note)):
        return _blocked("invalid_request", "note: one line of at most 500 characters")
    msg_id = raw.get("id", "")
    if msg_id != "" and not _ident(msg_id):
        return _blocked("invalid_request", "id: 1-128 of A-Z a-z 0-9 . _ : @ -")
    return _Common(str(key), str(msg_id), note)


def _pay_invoice_request(raw: Mapping[str, Any], c: _Common) -> PaymentRequest | Refusal:
    invoice = raw.get("invoice")
    if not (_short(invoice, 500) and (_ident(invoice) or _is_msgid(invoice))):
        return _blocked("invalid_request", "invoice: a Message-ID (<...>) or an INVOICE id")
    assert isinstance(invoice, str)
    payee = raw.get("payee", "")  # an INVOICE id is unique only within its sender
    if payee != "" and not valid_address(payee):
        return _blocked("invalid_request", "payee: the INVOICE sender's bare address")
    return PaymentRequest(
        kind="pay_invoice", invoice=invoice, key=c.key, msg_id=c.msg_id, note=c.note, to=str(payee)
    )


def _transfer(kind: PaymentKind, raw: Mapping[str, Any], c: _Common) -> PaymentRequest | Refusal:
    """The transfer every other operation makes: to whom, which asset, how much, where."""
    to = raw.get("to")
    if isinstance(to, list) and len(to) == 1:
        to = to[0]
    if not valid_address(to):
        return _blocked("invalid_request", "to: exactly one bare address")
    assert isinstance(to, str)
    chain, token = raw.get("chain"), raw.get("token")
    if not (_short(chain, 64) and _short(token, 64)):
        return _blocked("invalid_request", "chain and token are required")
    assert isinstance(chain, str) and isinstance(token, str)
    amount = _amount(raw.get("amount"))
    if amount is None:
        return _blocked("invalid_request", "amount: a positive integer in the asset's smallest unit")
    wallet = raw.get("wallet")
    if not _short(wallet, 128):
        return _blocked("invalid_request", "wallet: the payee's wallet address")
    assert isinstance(wallet, str)
    return PaymentRequest(
        kind=kind, to=to, chain=chain.strip().lower(), token=token.strip(), amount=amount,
        wallet=wallet.strip(), key=c.key, msg_id=c.msg_id, note=c.note,
    )


def _leg_fields(kind: str, raw: Mapping[str, Any], base: PaymentRequest) -> PaymentRequest | Refusal:
    """What the email leg of a pay, order, accept or offer adds to the transfer."""
    if kind == "pay":
        ref = raw.get("invoice_ref", "")
        if ref != "" and not (_ident(ref) or (_short(ref, 500) and _is_msgid(ref))):
            return _blocked("invalid_request", "invoice_ref: an INVOICE id or Message-ID")
        return replace(base, invoice=str(ref))
    if kind == "order":
        task = raw.get("task")
        if not _task(task):
            return _blocked("invalid_request", "task: a JSON object (or text) of at most 16 KiB")
        return replace(base, task=task)
    if kind == "accept":
        ref = raw.get("offer_ref")
        if not _ident(ref):
            return _blocked("invalid_request", "offer_ref: the OFFER's id")
        return replace(base, offer_ref=str(ref))
    want = raw.get("want")  # offer
    if (
        not isinstance(want, Mapping)
        or _amount(want.get("amount")) is None
        or not (_short(want.get("token"), 64) and _short(want.get("chain"), 64))
    ):
        return _blocked("invalid_request", "want: {amount, token, chain}")
    receive = raw.get("receive_wallet", "")
    if receive != "" and not _short(receive, 128):
        return _blocked("invalid_request", "receive_wallet: a wallet address")
    want_doc = {
        "amount": str(_amount(want.get("amount"))),
        "token": str(want["token"]).strip(),
        "chain": str(want["chain"]).strip().lower(),
    }
    return replace(base, want=want_doc, receive_wallet=str(receive))


def _task(value: Any) -> bool:
    if isinstance(value, str):
        return 0 < len(value) <= _MAX_TASK
    if not isinstance(value, Mapping) or not value:
        return False
    try:
        return len(json.dumps(value)) <= _MAX_TASK
    except (TypeError, ValueError, RecursionError):
        return False


def _is_msgid(value: Any) -> bool:
    return (
        isinstance(value, str)
        and value.startswith("<")
        and value.endswith(">")
        and "@" in value
        and " " not in value
    )


# -- the ordered, non-consuming checks ------------------------------------------------


def check_route(req: PaymentRequest, policy: SpendPolicy, *, invoice_bound: bool) -> Refusal | None:
    """S4's policy half, for every route that moves money (pay, pay_invoice, offer,
    accept, counter, order): under require_invoice only a payment bound to an INVOICE
    (pay_invoice, or pay naming its invoice) may go. One place, so a new route cannot
    forget it."""
    if policy.require_invoice and not invoice_bound:
        return _blocked("invoice_required", "this agent may only pay invoices (pay_invoice)")
    return None


def check_payee(req: PaymentRequest, policy: SpendPolicy) -> Refusal | None:
    """S2: the payee's mail address or domain is on the list; then, when the policy
    lists wallets, the payee's wallet is one of them. A miss is held, never refused."""
    if not allowlisted(req.to, policy.payees):
        return _held("payee_not_allowed", f"{req.to} is not an allowed payee")
    if policy.wallets and req.wallet not in policy.wallets:
        return _held("wallet_not_allowed", f"wallet {req.wallet} is not on the wallet allowlist")
    return None


def check_limits(req: PaymentRequest, policy: SpendPolicy) -> Refusal | None:
    """S3: the per-payment maximum. No limit entry at all, or a zero cap, holds (a new
    agent's payments all wait for a human until the operator sets a limit)."""
    limit = policy.limits.get(asset_key(req.chain, req.token))
    if limit is None:
        return _held("no_spend_limit", f"no spend limit is set for {asset_key(req.chain, req.token)}")
    if limit.per_payment is not None and req.amount > limit.per_payment:
        # Pure: no rail here to give the decimals, so the figures say what unit they are in.
        unit = f"smallest units of {req.token}"
        return _held("over_payment_max", f"{req.amount} > {limit.per_payment} {unit} per payment")
    return None


def policy_json(policy: SpendPolicy) -> str:
    return json.dumps(policy.to_json(), sort_keys=True)
