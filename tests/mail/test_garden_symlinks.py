"""Issue 29, item 8: an agent that can write its own Maildir plants symlinks in it — its
cur/, new/ or tmp/, its address folder, single message files — pointing at another
agent's folder or at a file outside the garden root. Compaction, delivery and pickup
refuse to follow them, report what they skipped, and touch nothing but the agent's own
mail. Real Maildirs, a real garden, the real CLI."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.mail.garden import GardenServer, deliver
from envelopay.mail.maildir import Pickup, UnsafeMaildir, deliver_file, ensure_maildir, mailbox_path
from envelopay.mail.retention import prune_processed

M, V = "mallory@garden.local", "victim@garden.local"
OLD = time.time() - 90 * 86400  # past any retention window


@dataclass
class World:
    root: Path
    mallory: Path
    victim: Path
    outside: Path  # a directory outside the root, laid out like a Maildir
    precious: Path  # a file outside the root

    def snapshot(self) -> dict[str, bytes]:
        """Every file of the victim's Maildir and outside the root, by path."""
        return {str(p): p.read_bytes() for top in (self.victim, self.outside)
                for p in sorted(top.rglob("*")) if p.is_file() and not p.is_symlink()}

    def replace(self, path: Path, target: Path) -> None:
        """What the agent does to its own Maildir: `path` becomes a link to `target`."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        path.symlink_to(target)


def _aged(path: Path) -> Path:
    os.utime(path, (OLD, OLD), follow_symlinks=False)
    return path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    root = tmp_path / "garden"
    mallory = ensure_maildir(mailbox_path(root, M))
    victim = ensure_maildir(mailbox_path(root, V))
    for box in (mallory, victim):  # unread and processed mail, all old enough to prune
        _aged(deliver_file(box, b"Subject: unread\r\n\r\nx\r\n"))
        done = deliver_file(box, b"Subject: read\r\n\r\nx\r\n")
        _aged(done.rename(box / "cur" / f"{done.name}:2,S"))
    outside = ensure_maildir(tmp_path / "outside")
    precious = tmp_path / "outside" / "cur" / "precious"
    precious.write_bytes(b"not the garden's")
    _aged(precious)
    yield World(root, mallory, victim, outside, precious)


# --------------------------------------------------------------------------- compact


def _compact(w: World) -> tuple[dict[str, bytes], list[dict[str, str]]]:
    before = {k: v for k, v in w.snapshot().items() if "/victim@garden.local/cur/" not in k}
    report = prune_processed(w.root, older_than=30 * 86400, now=time.time())
    after = w.snapshot()
    assert {k: v for k, v in after.items() if k in before} == before
    assert all(k in after for k in before)  # nothing of the victim's unread mail, nothing outside
    assert os.listdir(w.victim / "cur") == []  # the victim's own processed mail is compacted
    return after, report.skipped


def test_compact_does_not_follow_a_cur_linked_to_another_agents_new(world: World) -> None:
    world.replace(world.mallory / "cur", world.victim / "new")
    _, skipped = _compact(world)
    assert len(os.listdir(world.victim / "new")) == 1
    assert skipped == [{"path": f"{M}/cur", "reason": "a symlink or not a directory"}]


def test_compact_does_not_follow_a_cur_linked_outside_the_root(world: World) -> None:
    world.replace(world.mallory / "cur", world.outside / "cur")
    _compact(world)
    assert world.precious.read_bytes() == b"not the garden's"


def test_compact_does_not_follow_an_address_folder_linked_outside_the_root(world: World) -> None:
    world.replace(world.mallory, world.outside)
    _, skipped = _compact(world)
    assert world.precious.exists()
    assert skipped == [{"path": M, "reason": "the address folder is a symlink"}]


def test_compact_skips_message_files_that_are_links(world: World) -> None:
    [victims] = os.listdir(world.victim / "new")
    for name, target in (("a:2,S", world.precious), ("b:2,S", world.victim / "new" / victims)):
        _aged(_link(world.mallory / "cur" / name, target))
    _, skipped = _compact(world)
    assert world.precious.exists() and (world.victim / "new" / victims).exists()
    assert {s["path"] for s in skipped} == {f"{M}/cur/a:2,S", f"{M}/cur/b:2,S"}
    assert sorted(os.listdir(world.mallory / "cur")) == ["a:2,S", "b:2,S"]  # its real mail: gone


def _link(path: Path, target: Path) -> Path:
    path.symlink_to(target)
    return path


def test_garden_compact_names_what_it_skipped(world: World) -> None:
    world.replace(world.mallory / "cur", world.victim / "new")
    res = CliRunner().invoke(app, ["garden", "compact", "--root", str(world.root), "--older-than", "30",
                                   "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["skipped"] == [{"path": f"{M}/cur", "reason": "a symlink or not a directory"}]
    assert doc["removed"] == 1 and len(os.listdir(world.victim / "new")) == 1
    plain = CliRunner().invoke(app, ["garden", "compact", "--root", str(world.root), "--older-than", "30"])
    assert f"skipped {M}/cur: a symlink or not a directory" in plain.stdout


# -------------------------------------------------------------------------- delivery


@pytest.mark.parametrize("planted", ["new", "tmp", "folder"])
async def test_delivery_refuses_a_tampered_maildir_and_writes_nothing_through_it(
    world: World, planted: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="envelopay.garden")
    if planted == "folder":
        world.replace(world.mallory, world.outside)
    else:
        target = world.victim / "new" if planted == "new" else world.outside / "tmp"
        world.replace(world.mallory / planted, target)
    before = world.snapshot()
    async with GardenServer(world.root, [M, V], open_garden=True) as garden:
        raw = b"From: someone@garden.local\r\nSubject: hi\r\n\r\nhi\r\n"
        result = await deliver(raw, "someone@garden.local", [M, V], garden.endpoint)
        assert result.delivered == (V,)
        assert result.replies[M].code == 451
    after = world.snapshot()
    added = sorted(set(after) - set(before))
    assert len(added) == 1 and "/victim@garden.local/new/" in added[0]  # only the victim's own copy
    assert {k: after[k] for k in before} == before
    assert any("a symlink or not a directory" in r.getMessage() for r in caplog.records)


def test_deliver_file_and_ensure_maildir_refuse_symlinks(world: World) -> None:
    world.replace(world.mallory / "new", world.victim / "new")
    before = world.snapshot()
    with pytest.raises(UnsafeMaildir):
        deliver_file(world.mallory, b"x")
    with pytest.raises(UnsafeMaildir):
        ensure_maildir(world.mallory)
    assert world.snapshot() == before


# ---------------------------------------------------------------------------- pickup


async def test_pickup_skips_linked_messages_and_folders(world: World) -> None:
    [victims] = os.listdir(world.victim / "new")
    _link(world.mallory / "new" / "planted", world.victim / "new" / victims)
    _link(world.mallory / "new" / "outside", world.precious)
    async with Pickup([world.mallory, world.victim], use_inotify=False) as pickup:
        got = [await pickup.next(timeout=10), await pickup.next(timeout=10)]
        assert sorted((d.maildir.name, d.name) for d in got) == [(M, _real(world.mallory)), (V, victims)]
        assert sorted(pickup.skipped) == sorted([f"{world.mallory}/new/planted: a symlink, not a message",
                                                 f"{world.mallory}/new/outside: a symlink, not a message"])
        # The agent swaps its cur/ for the victim's new/: done() moves nothing there.
        mine = next(d for d in got if d.maildir == world.mallory)
        world.replace(world.mallory / "cur", world.victim / "new")
        assert pickup.done(mine) is None
        assert os.listdir(world.victim / "new") == [victims]
        assert (world.mallory / "new" / mine.name).exists()  # left where it was
        theirs = next(d for d in got if d.maildir == world.victim)
        assert pickup.done(theirs) is not None


def _real(box: Path) -> str:
    [name] = [n for n in os.listdir(box / "new") if not (box / "new" / n).is_symlink()]
    return name


async def test_pickup_skips_a_linked_new_folder_and_reads_the_rest(world: World) -> None:
    world.replace(world.mallory / "new", world.victim / "new")
    async with Pickup([world.mallory, world.victim], use_inotify=True) as pickup:
        got = await pickup.next(timeout=10)
        assert got.maildir == world.victim
        assert pickup.skipped == [f"{world.mallory / 'new'}: a symlink or not a directory"]


async def test_the_devnet_garden_keeps_registering_agents_past_a_tampered_folder(world: World) -> None:
    """The devnet's registry sync makes each new agent's Maildir: one planted link must not
    stop the agents registered after it (nor raise out of the garden's refresh)."""
    from envelopay.devnet.registry import AgentEntry, register_agent
    from envelopay.devnet.run import _RegistrySync

    home = world.root.parent / "home"
    late = "late@garden.local"
    mailbox_path(world.root, late).symlink_to(world.outside)  # planted before it registers
    for who in (late, "next@garden.local"):
        register_agent(home, AgentEntry(who, (who,)))
    async with GardenServer(world.root, [V], accounts=[]) as garden:
        _RegistrySync(home, garden, frozenset({V}))()
        assert {late, "next@garden.local", V} <= garden.addresses
        assert (mailbox_path(world.root, "next@garden.local") / "new").is_dir()
    assert sorted(p.name for p in world.outside.iterdir()) == ["cur", "new", "tmp"]
