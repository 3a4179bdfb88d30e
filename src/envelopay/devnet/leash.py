"""A leashed agent on the devnet (`agent create --devnet`): a garden mailbox for its
address, and the enforcer's garden account allowed to send as it.

A leashed agent holds no garden credential of its own: everything it sends goes through
the enforcer, which logs into the garden as its own account (`$ENVELOPAY_GARDEN_USER`,
default `enforcer`, in <home>/garden-accounts.json). So the agent is registered with the
devnet like `init --devnet` registers one (the garden then accepts INVOICE, FULFILL and
OOPS for it, in its per-address Maildir), without a credential, and its enforcer-held
wallets are recorded so that `envelopay fund ADDRESS` funds them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from envelopay.devnet import registry
from envelopay.devnet.run import EXTRA_ACCOUNTS
from envelopay.devnet.state import devnet_home, read_state
from envelopay.mail.addresses import require_address
from envelopay.mail.garden_auth import GardenAccount, load_accounts, put_account
from envelopay.mail.maildir import ensure_maildir, mailbox_path

__all__ = ["LeashedMailbox", "admit_leashed_agent"]


@dataclass(frozen=True, slots=True)
class LeashedMailbox:
    maildir: Path  # absolute: where the garden delivers the agent's mail
    registered: bool  # False: the address was registered already (e.g. by init --devnet), left as it was
    sender: str | None  # the garden account now allowed to send as the agent; None: there is none

    def to_json(self) -> dict[str, object]:
        return {"maildir": str(self.maildir), "registered": self.registered, "garden_account": self.sender}


def admit_leashed_agent(address: str, wallets: Mapping[str, str], *, sender: str = "enforcer",
                        home: Path | None = None) -> LeashedMailbox:
    """Give `address` a mailbox in the running devnet's garden and let the garden account
    `sender` (the enforcer's) send as it. Raises ConfigError when no devnet runs."""
    address = require_address(address, field="--address").lower()
    where = devnet_home(home)
    state = read_state(where)
    known = {a for e in registry.agent_entries(where) for a in e.addresses}
    registered = address not in known
    if registered:  # an agent init --devnet made keeps its own entry (keys, credential)
        registry.register_agent(where, registry.AgentEntry(address, (address,), {}, dict(wallets), None))
    maildir = ensure_maildir(mailbox_path(Path(state.garden_root), address)).resolve()
    return LeashedMailbox(maildir, registered, _let_send_as(where / EXTRA_ACCOUNTS, sender, address))


def _let_send_as(accounts: Path, user: str, address: str) -> str | None:
    """Add `address` to `user`'s account, keeping its secret; None when no such account
    exists (the enforcer then cannot send as the agent, and the caller says so)."""
    if not accounts.exists():
        return None
    found = [a for a in load_accounts(accounts) if a.user == user]
    if not found:
        return None
    account = found[0]
    put_account(accounts, GardenAccount(user, account.secret_sha256, account.addresses | {address}))
    return user
