"""Strict single-address validation, applied before any I/O.

A single-address field (From, To of one protocol message, an enforcer recipient, an
SMTP envelope address) must hold exactly one mailbox. The stdlib's `getaddresses` on
this Python is lax (FIELD-NOTES), so the grammar here is deliberately narrow:

    addr-spec    = local "@" domain
    local        = dot-atom (RFC 5322 atext, ASCII only; quoted local parts refused)
    domain       = LDH labels separated by dots (no literals, no trailing dot)
    name-addr    = [display-name] "<" addr-spec ">"   (only when allow_display_name)

Anything else — CR/LF or other control characters, commas, semicolons, a second
address, whitespace around or inside the addr-spec, group syntax — is refused with a
structured `AddressProblem`. `require_address` turns a problem into `UsageError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from envelopay.errors import UsageError

_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ADDR_SPEC_RE = re.compile(rf"({_DOT_ATOM})@({_LABEL}(?:\.{_LABEL})*)")
# A display name: printable ASCII without the specials that would open a second address
# or a group; or a quoted string without quotes/backslashes inside.
_PLAIN_NAME_RE = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.\- ]*")
_QUOTED_NAME_RE = re.compile(r'"[\x20\x21\x23-\x5b\x5d-\x7e]*"')
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")

MAX_LOCAL = 64
MAX_ADDRESS = 254


@dataclass(frozen=True, slots=True)
class AddressProblem:
    """Why a value is not exactly one acceptable address.

    reason -- a stable code: empty, control_char, several, whitespace, syntax, too_long,
              non_ascii
    """

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Address:
    """One validated mailbox. `addr` is local@domain with the domain lower-cased."""

    addr: str
    local: str
    domain: str
    display_name: str | None = None


def parse_address(value: str, *, allow_display_name: bool = False) -> Address | AddressProblem:
    """Return the single address in `value`, or the reason it is refused."""
    if not isinstance(value, str):
        return AddressProblem("empty", "no address given")
    return _parse_address(value, allow_display_name)


# Every mail passes the same few addresses through here several times (LMTP envelope on
# both ends, From for DKIM alignment); the answers are immutable values, so keep recent ones.
@lru_cache(maxsize=4096)
def _parse_address(value: str, allow_display_name: bool) -> Address | AddressProblem:
    if value == "":
        return AddressProblem("empty", "no address given")
    if _CONTROL_RE.search(value):
        return AddressProblem("control_char", "address contains a control character (CR, LF, NUL, ...)")
    if not value.isascii():
        return AddressProblem("non_ascii", "address contains non-ASCII characters")
    outside = value
    if allow_display_name and value.startswith('"'):
        # A quoted display name may hold commas ("Smith, Alice"); look past it.
        end = value.find('"', 1)
        outside = value[end + 1 :] if end > 0 else value
    if "," in outside or ";" in outside:
        return AddressProblem("several", "a single-address field holds a list or a group")
    if value.count("@") > 1 and "<" not in value:
        return AddressProblem("several", "more than one '@': several addresses or a malformed one")
    if value != value.strip():
        return AddressProblem("whitespace", "leading or trailing whitespace")
    display: str | None = None
    spec = value
    if "<" in value or ">" in value:
        if not allow_display_name:
            return AddressProblem("syntax", "expected a bare address (local@domain), not a name-addr")
        if value.count("<") != 1 or value.count(">") != 1 or not value.endswith(">"):
            return AddressProblem("several", "exactly one <addr-spec> is allowed, at the end")
        head, _, rest = value.partition("<")
        spec = rest[:-1]
        name = head.rstrip(" ")
        if head and not head.endswith(" ") and not head.endswith('"'):
            return AddressProblem("syntax", "display name must be separated from <addr-spec>")
        if name.startswith('"'):
            if not _QUOTED_NAME_RE.fullmatch(name):
                return AddressProblem("syntax", "malformed quoted display name")
            display = name[1:-1]
        elif name:
            if "@" in name or not _PLAIN_NAME_RE.fullmatch(name):
                return AddressProblem("several", "display name contains specials or a second address")
            display = name
    if any(c.isspace() for c in spec):
        return AddressProblem("whitespace", "whitespace inside the address")
    match = _ADDR_SPEC_RE.fullmatch(spec)
    if match is None:
        return AddressProblem("syntax", f"not an addr-spec: {spec[:80]!r}")
    local, domain = match.group(1), match.group(2).lower()
    if len(local) > MAX_LOCAL or len(spec) > MAX_ADDRESS:
        return AddressProblem("too_long", "address exceeds RFC 5321 length limits")
    return Address(addr=f"{local}@{domain}", local=local, domain=domain, display_name=display)


def require_address(value: str, *, field: str = "address", allow_display_name: bool = False) -> str:
    """The bare address in `value`, or UsageError naming the field and the reason."""
    parsed = parse_address(value, allow_display_name=allow_display_name)
    if isinstance(parsed, AddressProblem):
        raise UsageError(f"{field}: {parsed.reason}: {parsed.detail}")
    return parsed.addr


def is_valid_address(value: str) -> bool:
    """True when `value` is exactly one bare address."""
    return isinstance(parse_address(value), Address)


def domain_of(addr: str) -> str:
    """The lower-cased domain of an already validated bare address."""
    return addr.rpartition("@")[2].lower()
