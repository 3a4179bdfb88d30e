"""Wire models for the nine Envelopay message types (spec v0.1.0, "Nine message types").

Models are frozen pydantic v2 models with exactly the spec's fields. Unknown fields
are ignored here ("Unknown fields must be ignored"); `Parsed.body` keeps the raw
object for audit. Amounts are digit strings on the wire and `int` inside.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    ValidationInfo,
    model_validator,
)

__all__ = [
    "EXTENSION_OF",
    "SPEC_TYPES",
    "SUPPORTED_VERSIONS",
    "Accept",
    "Amount",
    "Fulfill",
    "Give",
    "Invoice",
    "Message",
    "MessageType",
    "Methods",
    "Offer",
    "Oops",
    "OopsError",
    "Order",
    "Pay",
    "RailMethod",
    "Wait",
    "Want",
    "Whatsup",
    "Which",
    "model_for",
]


class MessageType(StrEnum):
    """The nine subject keywords, as the lowercase names used in JSON `type`, and the
    types of this implementation's extensions (`EXTENSION_OF`), which a parser reads only
    when told to (`ParseOptions.extensions`) and nobody sends to a peer that did not
    advertise them (SPEC.md "Status while working")."""

    WHICH = "which"
    METHODS = "methods"
    PAY = "pay"
    ORDER = "order"
    FULFILL = "fulfill"
    INVOICE = "invoice"
    OFFER = "offer"
    ACCEPT = "accept"
    OOPS = "oops"
    # -- the `status` extension (protocol.status): never one of the nine
    WAIT = "wait"
    WHATSUP = "whatsup"

    @property
    def keyword(self) -> str:
        return self.value.upper()


# The spec's nine, in its order: what `unknown_type` lists and a strict parser knows.
SPEC_TYPES: tuple[MessageType, ...] = tuple(t for t in MessageType if t not in ("wait", "whatsup"))
# An extension type -> the extension that names it (advertised in `extensions`).
EXTENSION_OF: dict[MessageType, str] = {MessageType.WAIT: "status", MessageType.WHATSUP: "status"}

# (major, minor) pairs this implementation speaks. 0.1 is the default; 0.2 adds the
# prepaid ORDER fields.
SUPPORTED_VERSIONS: frozenset[tuple[int, int]] = frozenset({(0, 1), (0, 2)})
DEFAULT_VERSION = "0.1.0"

_DIGITS = re.compile(r"[0-9]{1,78}")  # 78 digits hold any uint256


def _amount(value: Any) -> int:
    # Spec: "Amount in smallest unit (string)". A JSON number, a sign, a decimal point
    # or an empty string is refused; leading zeros are tolerated (still decimal digits).
    if isinstance(value, int) and not isinstance(value, bool):
        raise ValueError("amount must be a string of decimal digits, not a JSON number")
    if not isinstance(value, str) or not _DIGITS.fullmatch(value):
        raise ValueError("amount must be a string of decimal digits in the smallest unit")
    return int(value)


def _amount_in(value: Any, info: ValidationInfo) -> Any:
    # Python callers may pass an int; on the wire (validation context {"wire": True},
    # which protocol.parse supplies) only a digit string is accepted.
    wire = isinstance(info.context, dict) and bool(info.context.get("wire"))
    if not wire and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return _amount(value)


Amount = Annotated[
    int,
    BeforeValidator(_amount_in),
    PlainSerializer(lambda v: str(v), return_type=str),
]

Text = Annotated[str, StringConstraints(max_length=10_000)]
Ident = Annotated[str, StringConstraints(min_length=1, max_length=256)]
Token = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Chain = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Wallet = Annotated[str, StringConstraints(min_length=1, max_length=256)]
JsonObject = dict[str, Any]
# An extension's name, as advertised in WHICH, METHODS or ORDER `extensions` (SPEC.md "Status
# while working"): lowercase letters, digits, `_`, `-`; at most 16 of them.
ExtensionName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_-]{1,32}$")]
Extensions = Annotated[list[ExtensionName], Field(max_length=16)]


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)


class _Body(_Wire):
    # Defaults to 0.1.0 for messages built in Python; protocol.parse requires `v` on the wire.
    v: Annotated[str, StringConstraints(pattern=r"^[0-9]+\.[0-9]+(\.[0-9]+)?([-+][0-9A-Za-z.-]+)?$")] = (
        DEFAULT_VERSION
    )

    @property
    def version(self) -> tuple[int, int]:
        major, minor = self.v.split(".")[:2]
        return int(major), int(minor.split("-")[0].split("+")[0])


class Which(_Body):
    type: Literal["which"] = "which"
    v: str = DEFAULT_VERSION
    id: Ident | None = None
    note: Text | None = None
    task: JsonObject | Text | None = None
    # Additive (SPEC.md "Status while working"): the extensions the asker speaks.
    extensions: Extensions | None = None


# The lenient interop profile (SPEC.md "Interop profile `lenient`") accepts a METHODS
# rail without `price` as "price on request": `price` is then None. The parser asks
# for it with the validation context {"lenient": True}; strict stays the default.
_PRICE_ON_REQUEST = object()


def _price_in(value: Any) -> Any:
    if value is _PRICE_ON_REQUEST:
        return None
    if value is None:
        raise ValueError("price must be a string of decimal digits in the smallest unit")
    return value


class RailMethod(_Wire):
    chain: Chain
    token: Token
    wallet: Wallet
    price: Annotated[Amount | None, BeforeValidator(_price_in)]  # None: price on request (lenient)

    @model_validator(mode="before")
    @classmethod
    def _price_on_request(cls, data: Any, info: ValidationInfo) -> Any:
        lenient = isinstance(info.context, dict) and bool(info.context.get("lenient"))
        if lenient and isinstance(data, dict) and "price" not in data:
            return {**data, "price": _PRICE_ON_REQUEST}
        return data


class Methods(_Body):
    type: Literal["methods"] = "methods"
    rails: Annotated[list[RailMethod], Field(min_length=1)]
    id: Ident | None = None
    which_ref: Ident | None = None
    note: Text | None = None
    fallback: Text | None = None
    # Additive (SPEC.md "Proof binding"): the binding the payer's proof must carry.
    binding: Token | None = None
    # Additive (SPEC.md "Status while working"): the extensions this worker speaks, named
    # only to an asker whose WHICH named them.
    extensions: Extensions | None = None


class Pay(_Body):
    type: Literal["pay"] = "pay"
    id: Ident
    amount: Amount
    token: Token
    chain: Chain
    proof: JsonObject
    invoice_ref: Ident | None = None
    note: Text | None = None


class Order(_Body):
    type: Literal["order"] = "order"
    id: Ident
    task: JsonObject | Text
    note: Text | None = None
    # Additive (SPEC.md "Status while working"): the extensions the buyer reads.
    extensions: Extensions | None = None
    # v0.2.0 prepaid ORDER: once `amount` is present, token, chain and proof are required.
    amount: Amount | None = None
    token: Token | None = None
    chain: Chain | None = None
    proof: JsonObject | None = None

    @property
    def prepaid(self) -> bool:
        return self.amount is not None

    @model_validator(mode="after")
    def _prepaid_fields(self) -> Order:
        extra = (self.amount, self.token, self.chain, self.proof)
        if any(x is not None for x in extra):
            if self.version < (0, 2):
                raise ValueError("prepaid ORDER fields need v 0.2.x")
            if self.amount is None or self.token is None or self.chain is None or self.proof is None:
                raise ValueError("prepaid ORDER needs amount, token, chain and proof together")
        return self


class Fulfill(_Body):
    type: Literal["fulfill"] = "fulfill"
    id: Ident
    order_ref: Ident
    result: Any
    note: Text | None = None
    # Additive (SPEC.md "Refunds"): an overpayment's excess the worker paid back, shaped as
    # an OOPS's `refund` ({chain, token, amount, wallet, proof, status, reason: "overpaid"});
    # a strict peer ignores it.
    refund: dict[str, Any] | None = None


class Invoice(_Body):
    type: Literal["invoice"] = "invoice"
    id: Ident
    amount: Amount
    token: Token
    chain: Chain
    wallet: Wallet
    due: Text | None = None
    order_ref: Ident | None = None
    note: Text | None = None
    binding: Token | None = None  # additive, as Methods.binding


class Give(_Wire):
    amount: Amount
    token: Token
    chain: Chain
    to: Wallet
    proof: JsonObject


class Want(_Wire):
    amount: Amount
    token: Token
    chain: Chain


class Offer(_Body):
    type: Literal["offer"] = "offer"
    id: Ident
    give: Give
    want: Want
    wallet: Wallet
    note: Text | None = None


class Accept(_Body):
    type: Literal["accept"] = "accept"
    id: Ident
    offer_ref: Ident
    amount: Amount
    token: Token
    chain: Chain
    proof: JsonObject
    note: Text | None = None


class OopsError(BaseModel):
    """`error` object of an OOPS: a `code`, plus any detail fields (kept verbatim)."""

    model_config = ConfigDict(frozen=True, extra="allow", strict=True)
    code: Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Oops(_Body):
    type: Literal["oops"] = "oops"
    note: Text
    id: Ident | None = None
    error: OopsError | None = None
    ref: Ident | None = None


# The `status` extension (SPEC.md "Status while working"). A job state is a short
# lowercase word; the seven this worker writes are protocol.status.JOB_STATES, and a
# reader shows one it does not know rather than refuse it (a later worker may add one).
JobStateName = Annotated[str, StringConstraints(pattern=r"^[a-z_]{1,32}$")]
# ISO 8601 UTC, e.g. "2026-12-04T23:01:02Z": kept as written, a signal for people.
Stamp = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class Wait(_Body):
    """Worker -> buyer: the job of `order_ref` is in `state` (since `at[state]`)."""

    type: Literal["wait"] = "wait"
    id: Ident
    order_ref: Ident
    state: JobStateName
    at: Annotated[dict[JobStateName, Stamp], Field(max_length=16)] = Field(default_factory=dict)
    ref: Ident | None = None  # the WHATSUP this answers; absent when the worker tells unasked
    note: Text | None = None


class Whatsup(_Body):
    """Buyer -> worker: how is the job of `order_ref` going?"""

    type: Literal["whatsup"] = "whatsup"
    id: Ident
    order_ref: Ident
    note: Text | None = None


Message = Which | Methods | Pay | Order | Fulfill | Invoice | Offer | Accept | Oops | Wait | Whatsup

_MODELS: dict[MessageType, type[_Body]] = {
    MessageType.WHICH: Which,
    MessageType.METHODS: Methods,
    MessageType.PAY: Pay,
    MessageType.ORDER: Order,
    MessageType.FULFILL: Fulfill,
    MessageType.INVOICE: Invoice,
    MessageType.OFFER: Offer,
    MessageType.ACCEPT: Accept,
    MessageType.OOPS: Oops,
    MessageType.WAIT: Wait,
    MessageType.WHATSUP: Whatsup,
}


def model_for(kind: MessageType) -> type[_Body]:
    return _MODELS[kind]


def is_proof_carrying(message: Message) -> bool:
    """PAY, OFFER, ACCEPT and a prepaid ORDER carry a payment proof (spec "Verification")."""
    if isinstance(message, Order):
        return message.prepaid
    return isinstance(message, Pay | Offer | Accept)
