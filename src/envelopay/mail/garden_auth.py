"""Who is sending, inside the garden: per-agent credentials, the From check, and the
trace header only the garden writes (issue 11, item 9).

All garden agents sign DKIM as one domain, so DKIM cannot tell garden mailboxes apart
(the walled-garden seed: impersonation is an authentication problem the garden
solves). Each agent therefore holds its own credential toward the garden and sends
with LMTP AUTH PLAIN (RFC 4954, RFC 4616) on the loopback or Unix-socket connection.
The garden then:

- refuses MAIL before AUTH (530), and an envelope sender that is not one of the
  authenticated account's addresses (553);
- reads the header block with protocol.headers (the reader the parser and DKIM use) and
  refuses a block that reader refuses, or a From that is not one of the account's
  addresses (550 5.7.1, per recipient);
- removes every inbound Authentication-Results claiming its own authserv-id and
  prepends its own, `Authentication-Results: <garden>; auth=pass smtp.auth=<user>`
  (RFC 8601 2.7.4), so that header is one only the garden can have written.

Secrets are 256-bit random tokens; only their SHA-256 is kept (as for enforcer tokens).
An agent keeps its own secret in a file beside its config (`write_secret`, mode 0600;
`envelopay init` writes keys/garden.secret), never in the config itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError, UsageError
from envelopay.mail.addresses import require_address
from envelopay.protocol import outside_json
from envelopay.protocol.headers import Field, HeaderBlock, HeaderRefusal, addresses, read_headers

__all__ = [
    "AccountsFile",
    "AddressTaken",
    "GardenAccount",
    "Grant",
    "account_with",
    "add_account",
    "all_froms_allowed",
    "authenticated_sender",
    "claims_of",
    "file_stamp",
    "grant",
    "load_accounts",
    "new_account",
    "new_secret",
    "one_owner",
    "put_account",
    "read_secret",
    "save_accounts",
    "secret_hash",
    "stamp",
    "stamp_prepend",
    "write_secret",
]

_log = logging.getLogger("envelopay.garden")
_USER = re.compile(r"[A-Za-z0-9@._+-]{1,254}")
_COMMENT = re.compile(r"\([^()]*\)")


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class GardenAccount:
    """One credential toward the garden: a login, the hash of its secret, and the
    addresses it may send as (an agent: its own address; the enforcer: its agents')."""

    user: str
    secret_sha256: str
    addresses: frozenset[str]

    def check(self, secret: str) -> bool:
        return hmac.compare_digest(secret_hash(secret), self.secret_sha256)

    def may_send_as(self, address: str) -> bool:
        return address.lower() in self.addresses


def new_secret() -> str:
    return "gdn_" + secrets.token_urlsafe(32)


def account_with(user: str, addresses: Iterable[str], secret: str) -> GardenAccount:
    """The account for `user` proven by an existing `secret` (e.g. one an agent keeps)."""
    if not _USER.fullmatch(user):
        raise ConfigError(f"garden account user: 1-254 of A-Z a-z 0-9 @ . _ + - ({user!r})")
    addrs = frozenset(require_address(a, field="garden account address").lower() for a in addresses)
    if not addrs:
        raise ConfigError("a garden account needs at least one address")
    return GardenAccount(user, secret_hash(secret), addrs)


def new_account(user: str, addresses: Iterable[str]) -> tuple[GardenAccount, str]:
    """A new account and its secret (shown once; only the hash is kept)."""
    secret = new_secret()
    return account_with(user, addresses, secret), secret


def write_secret(path: Path) -> str:
    """The agent's garden secret at `path`: the one already there, or a new one written
    with mode 0600 (created that way, never readable by others even for a moment)."""
    path = Path(path)
    if path.exists():
        return read_secret(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = new_secret()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


def read_secret(path: Path) -> str:
    try:
        secret = Path(path).read_text().strip()
    except OSError as exc:
        raise ConfigError(f"garden secret {path}: {exc.strerror or exc}") from exc
    if not secret or any(c.isspace() for c in secret):
        raise ConfigError(f"garden secret {path}: one token expected (envelopay init writes it)")
    return secret


def load_accounts(path: Path) -> list[GardenAccount]:
    """Accounts from a JSON file: [{"user", "secret_sha256", "addresses": [...]}, ...]."""
    try:
        # outside_json: a file nested 200,000 deep was a RecursionError traceback (a
        # segfault in a process that imported py-evm); not UTF-8, a lone surrogate: refused.
        data = outside_json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"garden accounts {path}: {exc}") from exc
    if not isinstance(data, list):
        raise ConfigError(f"garden accounts {path}: a JSON list is expected")
    out: list[GardenAccount] = []
    for item in data:
        if not isinstance(item, Mapping) or not isinstance(item.get("user"), str):
            raise ConfigError(f"garden accounts {path}: each entry needs user, secret_sha256, addresses")
        digest, addrs = item.get("secret_sha256"), item.get("addresses")
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ConfigError(f"garden accounts {path}: {item['user']}: secret_sha256 must be 64 hex digits")
        if not isinstance(addrs, list) or not addrs:
            raise ConfigError(f"garden accounts {path}: {item['user']}: addresses must be a non-empty list")
        out.append(GardenAccount(item["user"], digest, frozenset(
            require_address(str(a), field="garden account address").lower() for a in addrs
        )))
    return out


def save_accounts(path: Path, accounts: Iterable[GardenAccount]) -> None:
    """Write the accounts file whole (mode 0600): a new file renamed over the old, so a
    garden re-reading it meanwhile sees the old list or the new, never half of one."""
    path = Path(path)
    doc = [
        {"user": a.user, "secret_sha256": a.secret_sha256, "addresses": sorted(a.addresses)} for a in accounts
    ]
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class AddressTaken(UsageError):
    """A grant names addresses another account holds (SPEC.md "Walled garden": an address
    belongs to one account). Nothing was written."""

    code = "address_taken"
    field = "--take"

    def __init__(self, user: str, held: Mapping[str, str]) -> None:
        self.held = dict(held)  # address -> the account holding it
        named = ", ".join(f"{a} (held by {o})" for a, o in sorted(self.held.items()))
        super().__init__(
            f"{user} cannot be granted an address another account holds: {named}; nothing was "
            f"granted (take each on purpose with --take ADDRESS, or leave it out)")


@dataclass(frozen=True, slots=True)
class Grant:
    """What one `grant` did: the account's addresses, which of them were taken from whom,
    whether the user existed before, and the accounts a take left with no address (gone)."""

    user: str
    addresses: tuple[str, ...]
    taken: Mapping[str, str]
    replaced: bool
    emptied: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "addresses": list(self.addresses), "taken": dict(self.taken),
                "replaced": self.replaced, "emptied": list(self.emptied)}

    def lines(self) -> list[str]:
        verb = "replaced" if self.replaced else "granted"
        out = [f"{verb} {self.user}: may send as {', '.join(self.addresses)}"]
        out += [f"took {a} from {o}" for a, o in sorted(self.taken.items())]
        out += [f"removed {u}: it held no address any more" for u in self.emptied]
        return out


def grant(path: Path, account: GardenAccount, *, take: Iterable[str] = ()) -> Grant:
    """Add (or replace, by user) `account` in the accounts file at `path` (created if absent,
    mode 0600). An address another account holds is refused (AddressTaken, nothing written)
    unless `take` names it: then it moves to `account`, and an account left with no address
    is removed. Addresses compare case-insensitively (they are stored lower-cased)."""
    path = Path(path)
    taking = {require_address(t, field="--take").lower() for t in take}
    if stray := sorted(taking - account.addresses):
        raise UsageError(f"--take {', '.join(stray)}: not among the addresses granted to {account.user}")
    existing = load_accounts(path) if path.exists() else []
    others = [a for a in existing if a.user != account.user]
    held = {addr: a.user for a in others for addr in a.addresses if addr in account.addresses}
    if refused := {addr: owner for addr, owner in held.items() if addr not in taking}:
        raise AddressTaken(account.user, refused)
    kept: list[GardenAccount] = []
    emptied: list[str] = []
    for other in others:
        left = other.addresses - account.addresses
        if not left:
            emptied.append(other.user)
        elif left == other.addresses:
            kept.append(other)
        else:
            kept.append(GardenAccount(other.user, other.secret_sha256, left))
    save_accounts(path, [*kept, account])
    return Grant(account.user, tuple(sorted(account.addresses)), held,
                 replaced=len(others) < len(existing), emptied=tuple(emptied))


def put_account(path: Path, account: GardenAccount) -> Grant:
    """Add (or replace, by user) `account` in the accounts file at `path` (mode 0600); an
    address another account holds is refused (`grant`, with nothing taken)."""
    return grant(path, account)


def add_account(path: Path, user: str, addresses: Iterable[str]) -> str:
    """Add (or replace) `user` in the accounts file at `path` (created if absent, mode
    0600); return the new secret. An address another account holds is refused (`grant`)."""
    account, secret = new_account(user, addresses)
    grant(path, account)
    return secret


def one_owner(accounts: Iterable[GardenAccount]) -> tuple[list[GardenAccount], dict[str, list[str]]]:
    """The accounts with every address more than one of them holds taken from all of them
    (a file edited by hand, or written before the rule): a contested address sends as
    nobody until an operator grants it to one. Returns the accounts and address -> holders."""
    accounts = list(accounts)
    holders: dict[str, list[str]] = {}
    for a in accounts:
        for addr in a.addresses:
            holders.setdefault(addr, []).append(a.user)
    contested = {addr: users for addr, users in holders.items() if len(users) > 1}
    if not contested:
        return accounts, {}
    unique = [GardenAccount(a.user, a.secret_sha256, a.addresses - contested.keys()) for a in accounts]
    return unique, contested


def _claims(value: bytes, authserv_id: str) -> bool:
    text = _COMMENT.sub(" ", value.replace(b"\r\n", b"").decode("utf-8", "replace"))
    first = text.split(";")[0].split()
    return bool(first) and first[0].lower() == authserv_id.lower()


def stamp(raw: bytes, block: HeaderBlock, *, authserv_id: str, user: str | None) -> bytes:
    """The message as the garden stores it: inbound Authentication-Results claiming
    `authserv_id` removed, the garden's own prepended when `user` authenticated. `raw`
    is kept byte for byte unless a forged header had to go."""
    forged = {
        id(f) for f in block.fields
        if f.name == "authentication-results" and _claims(f.raw_value, authserv_id)
    }
    if forged:
        head = b"".join(f.raw_name + b":" + f.raw_value for f in block.fields if id(f) not in forged)
        raw = head + b"\r\n" + block.body
    if user is not None:
        raw = f"Authentication-Results: {authserv_id}; auth=pass smtp.auth={user}\r\n".encode() + raw
    return raw


def stamp_prepend(raw: bytes, *, authserv_id: str, user: str) -> bytes:
    """`raw` byte for byte behind the garden's own Authentication-Results (for a block
    that carries no claim of `authserv_id`: see claims_of)."""
    return f"Authentication-Results: {authserv_id}; auth=pass smtp.auth={user}\r\n".encode() + raw


def claims_of(fields: Iterable[Field], authserv_id: str) -> bool:
    """Does any Authentication-Results among `fields` claim `authserv_id`?"""
    return any(f.name == "authentication-results" and _claims(f.raw_value, authserv_id) for f in fields)


def all_froms_allowed(account: GardenAccount, fields: Iterable[Field]) -> bool:
    """At least one From, and every From field holds exactly one address `account` may
    send as (for a block repeated From fields made the shared reader refuse)."""
    froms = [f for f in fields if f.name == "from"]
    if not froms:
        return False
    for f in froms:
        found = addresses(f.value)
        if len(found) != 1 or not account.may_send_as(found[0]):
            return False
    return True


def from_address(block: HeaderBlock) -> str | None:
    """The one From address, read as every component reads it; None if not exactly one."""
    froms = block.get_all("from")
    found = addresses(froms[0].value) if len(froms) == 1 else []
    return found[0] if len(found) == 1 else None


def authenticated_sender(raw: bytes, *, authserv_id: str) -> str | None:
    """The sender the garden authenticated, from the topmost Authentication-Results,
    trusted only when it carries `authserv_id` exactly (the garden strips any inbound
    copy); None when the message did not come through an authenticating garden."""
    read = read_headers(raw)
    if isinstance(read, HeaderRefusal):
        return None
    ar = read.get_all("authentication-results")
    if not ar or not _claims(ar[0].raw_value, authserv_id):
        return None
    for part in _COMMENT.sub(" ", ar[0].value).split(";")[1:]:
        words = part.split()
        if words and words[0].lower() == "auth=pass":
            for w in words[1:]:
                if w.lower().startswith("smtp.auth="):
                    return w.split("=", 1)[1]
    return None


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """A file's inode, size and mtime (None when absent): two writes within one mtime tick
    still differ in size or inode (files written by os.replace get a new inode)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class AccountsFile:
    """An accounts file (plus accounts held only in memory, e.g. a worker's own), re-read
    when the file changed: a garden's `refresh` hook, called before it refuses an unknown
    login or a wrong secret, so an agent admitted while the garden runs can send."""

    def __init__(self, path: Path | None, extra: Iterable[GardenAccount] = ()) -> None:
        self.path, self.extra = path, tuple(extra)
        self._stamp: tuple[int, int, int] | None = None
        self.garden: Any = None  # the GardenServer to update (set once it exists)

    def _now(self) -> tuple[int, int, int] | None:
        return file_stamp(self.path) if self.path is not None else None

    def accounts(self) -> list[GardenAccount]:
        self._stamp = self._now()
        found = load_accounts(self.path) if self.path is not None and self._stamp is not None else []
        # One owner per address among the file's accounts (the in-memory ones are the
        # node's own, which shares its agent's addresses by design).
        found, contested = one_owner(found)
        for addr, users in sorted(contested.items()):
            _log.warning("garden accounts %s: %s is held by %s; nobody may send as it until one "
                         "account holds it (envelopay garden account --take)",
                         self.path, addr, ", ".join(users))
        return [*found, *self.extra]

    def __call__(self) -> None:
        if self.garden is not None and self._now() != self._stamp:
            self.garden.accounts = {a.user: a for a in self.accounts()}
