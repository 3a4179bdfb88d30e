"""Issue 29, item 5: an address belongs to one garden account. `garden account` refuses to
grant an address another account holds (by -a, by an agent's -c config, responders and
case variants included) unless --take names it, says what it granted, and a garden
reading an accounts file where two accounts hold one address lets neither send as it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.errors import TransportError
from envelopay.mail.garden import GardenServer, deliver
from envelopay.mail.garden_auth import (
    AccountsFile,
    AddressTaken,
    account_with,
    grant,
    load_accounts,
    new_account,
    save_accounts,
)
from envelopay.node.init import init_agent

runner = CliRunner()
W, K = "worker@garden.local", "kv-worker@garden.local"


def _account(path: Path, *args: str) -> tuple[int, dict[str, object], str]:
    res = runner.invoke(app, ["garden", "account", "--accounts", str(path), "--json", *args])
    return res.exit_code, json.loads(res.stdout), res.stderr


@pytest.fixture
def accounts(tmp_path: Path) -> Path:
    path = tmp_path / "garden-accounts.json"
    save_accounts(path, [new_account(W, [W, K])[0]])
    return path


@pytest.mark.parametrize("asked", [W, "Worker@Garden.Local", K, "KV-WORKER@garden.local"])
def test_an_address_another_account_holds_is_refused_and_nothing_is_written(
    accounts: Path, asked: str
) -> None:
    before = accounts.read_bytes()
    code, doc, err = _account(accounts, "enforcer", "-a", "sdr@garden.local", "-a", asked)
    assert code == 2, doc
    assert doc["error"] == "address_taken" and doc["field"] == "--take"
    detail = str(doc["detail"])
    assert f"{asked.lower()} (held by {W})" in detail and "nothing was granted" in detail
    assert "error: " in err
    assert accounts.read_bytes() == before  # no half-done grant: the file is as it was


def test_take_moves_the_named_address_and_says_so(accounts: Path) -> None:
    code, doc, _ = _account(accounts, "enforcer", "-a", "sdr@garden.local", "-a", "Worker@Garden.Local",
                            "--take", "WORKER@garden.local")
    assert code == 0, doc
    assert doc["user"] == "enforcer" and doc["addresses"] == ["sdr@garden.local", W]
    assert doc["taken"] == {W: W} and doc["replaced"] is False and doc["emptied"] == []
    held = {a.user: a.addresses for a in load_accounts(accounts)}
    assert held == {W: frozenset({K}), "enforcer": frozenset({"sdr@garden.local", W})}
    # Taking every address an account holds removes that account.
    code, doc, _ = _account(accounts, "kv", "-a", K, "--take", K)
    assert code == 0 and doc["emptied"] == [W]
    assert {a.user for a in load_accounts(accounts)} == {"enforcer", "kv"}


def test_take_names_only_addresses_being_granted(accounts: Path) -> None:
    before = accounts.read_bytes()
    code, doc, _ = _account(accounts, "enforcer", "-a", "sdr@garden.local", "--take", W)
    assert code == 2 and "--take worker@garden.local: not among" in str(doc["detail"])
    assert accounts.read_bytes() == before


def test_the_account_command_prints_what_it_granted(accounts: Path) -> None:
    loc_args = ["garden", "account", "loc", "-a", "loc@garden.local", "--accounts", str(accounts)]
    res = runner.invoke(app, loc_args)
    assert res.exit_code == 0, res.output
    [secret] = res.stdout.split()  # stdout is the secret alone, for $(...)
    assert res.stderr.splitlines() == ["granted loc: may send as loc@garden.local"]
    [loc] = [a for a in load_accounts(accounts) if a.user == "loc"]
    assert loc.check(secret)
    again = runner.invoke(app, loc_args)
    assert again.stderr.splitlines() == ["replaced loc: may send as loc@garden.local"]


def test_replacing_its_own_account_takes_nothing(accounts: Path) -> None:
    done = grant(accounts, new_account(W, [W, K])[0])
    assert done.replaced and done.taken == {} and done.emptied == ()


def _agent(tmp_path: Path, name: str, responder: str | None = None) -> Path:
    """An agent `init` set up; `responder`: its config edited to declare that address too."""
    init_agent(tmp_path / name, address=f"{name}@garden.local")
    cfg = tmp_path / name / "envelopay.toml"
    if responder is not None:
        cfg.write_text(cfg.read_text() + f'\n[[responders]]\naddress = "{responder}"\n'
                       'handler = "envelopay.endpoints.reference:kv_get"\n'
                       'schema = "envelopay.endpoints.reference:KvGet"\n')
    return cfg


def test_two_default_configs_declare_no_address_in_common(tmp_path: Path) -> None:
    """`init` for two agents, both admitted into one file: nothing to refuse, nothing taken."""
    _agent(tmp_path, "worker")
    path = tmp_path / "worker" / "garden-accounts.json"
    code, doc, _ = _account(path, "-c", str(_agent(tmp_path, "client")))
    assert code == 0, doc
    assert doc["user"] == "client@garden.local" and doc["taken"] == {}
    assert doc["addresses"] == ["client@garden.local", "kv-client@garden.local"]
    held = [a.addresses for a in load_accounts(path)]
    assert held[0].isdisjoint(held[1])


@pytest.mark.parametrize("declared", [W, "Worker@Garden.Local", "kv-worker@garden.local"])
def test_an_agents_own_config_cannot_claim_another_agents_address(tmp_path: Path, declared: str) -> None:
    _agent(tmp_path, "worker")
    path = tmp_path / "worker" / "garden-accounts.json"
    before = path.read_bytes()
    mallory = _agent(tmp_path, "mallory", responder=declared)
    code, doc, _ = _account(path, "-c", str(mallory))
    assert code == 2 and doc["error"] == "address_taken", doc
    assert path.read_bytes() == before
    plain = runner.invoke(app, ["garden", "account", "--accounts", str(path), "-c", str(mallory)])
    assert plain.exit_code == 2 and f"{declared.lower()} (held by {W})" in plain.stderr
    # Named on purpose, it moves, and the output says from whom.
    taken = runner.invoke(app, ["garden", "account", "--accounts", str(path), "-c", str(mallory),
                                "--take", declared])
    assert taken.exit_code == 0, taken.output
    assert f"took {declared.lower()} from {W}" in taken.stdout.splitlines()


async def test_a_file_where_two_accounts_hold_one_address_lets_neither_send_as_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file edited by hand (or written before the rule), read by a running garden."""
    caplog.set_level(logging.WARNING, logger="envelopay.garden")
    path = tmp_path / "accounts.json"
    worker, w_secret = new_account(W, [W])
    save_accounts(path, [worker])
    known = AccountsFile(path)
    async with GardenServer(tmp_path / "mail", [W, "m@garden.local"], accounts=known.accounts(),
                            refresh=known) as garden:
        known.garden = garden
        raw = f"From: {W}\r\nTo: {W}\r\nSubject: x\r\n\r\nhi\r\n".encode()
        assert (await deliver(raw, W, [W], garden.endpoint, auth=(W, w_secret))).delivered == (W,)
        m_secret = "gdn_mallory-secret"
        save_accounts(path, [worker, account_with("m", ["m@garden.local", "WORKER@garden.local"], m_secret)])
        for creds in (("m", m_secret), (W, w_secret)):  # the unknown login re-reads the file first
            with pytest.raises(TransportError, match="553"):
                await deliver(raw, W, [W], garden.endpoint, auth=creds)
        assert len(list((garden.maildir(W) / "new").iterdir())) == 1
    warned = [r.getMessage() for r in caplog.records]
    assert any("worker@garden.local is held by worker@garden.local, m" in m for m in warned), warned


def test_address_taken_is_bad_input_with_its_own_word() -> None:
    from envelopay.cli.output import exit_of

    assert exit_of(AddressTaken("x", {W: W})) == (2, "address_taken")


def test_the_file_is_replaced_whole(accounts: Path) -> None:
    """save_accounts renames a whole new file over the old (a garden re-reading it sees one
    or the other): no temporary file is left, and the mode stays 0600."""
    inode = accounts.stat().st_ino
    grant(accounts, new_account("loc", ["loc@garden.local"])[0])
    assert sorted(p.name for p in accounts.parent.iterdir()) == [accounts.name]
    assert accounts.stat().st_mode & 0o777 == 0o600 and accounts.stat().st_ino != inode


async def test_a_take_counts_on_a_running_garden_even_on_an_open_connection(tmp_path: Path) -> None:
    """`garden account --take` while the garden runs: the taker may send as the address from
    its first login, and the old holder may not — neither on a new login nor on the
    connection it had open before the take."""
    from envelopay.mail.garden import LmtpClient

    path = tmp_path / "accounts.json"
    worker, w_secret = new_account(W, [W, K])
    save_accounts(path, [worker])
    known = AccountsFile(path)
    async with GardenServer(tmp_path / "mail", [W, K], accounts=known.accounts(), refresh=known) as garden:
        known.garden = garden
        raw = f"From: {W}\r\nTo: {K}\r\nSubject: x\r\n\r\nhi\r\n".encode()
        async with LmtpClient(garden.endpoint, auth=(W, w_secret)) as before_take:
            assert (await before_take.send(raw, W, [K])).delivered == (K,)
            code, doc, _ = _account(path, "enforcer", "-a", W, "--take", W)
            assert code == 0 and doc["taken"] == {W: W}
            with pytest.raises(TransportError, match="553"):  # the open connection: its next MAIL
                await before_take.send(raw, W, [K])
            secret = str(doc["secret"])
            assert (await deliver(raw, W, [K], garden.endpoint, auth=("enforcer", secret))).delivered == (K,)
        with pytest.raises(TransportError, match="553"):  # a new login: the same
            await deliver(raw, W, [K], garden.endpoint, auth=(W, w_secret))
        # What it still holds, it still sends as.
        still = f"From: {K}\r\nTo: {W}\r\nSubject: y\r\n\r\nhi\r\n".encode()
        assert (await deliver(still, K, [W], garden.endpoint, auth=(W, w_secret))).delivered == (W,)
    assert len(list((garden.maildir(K) / "new").iterdir())) == 2
