"""Where the mailbox keeps its files: Maildir folders under the agent's directory.

Layout (seed agent-mailbox-actions-and-storage, adapted to Maildir so the garden and
IMAP ingestion write the same format)::

    mailbox/inbox/   {tmp,new,cur}   received mail (exact bytes as received)
    mailbox/sent/    {tmp,new,cur}   one record per successful send
    mailbox/archive/ {tmp,new,cur}   archived inbox mail
    mailbox/outbox/  {tmp,new,cur}   composed, not (yet) accepted by the send function
    mailbox/attachments/<id>/        received attachments, extracted for the agent
    mailbox/index.sqlite3            the index (envelopay.mail.mailbox.index)
    mailbox/contacts.json            private contact book (atomic replacement)

Writes are atomic (tmp → new, envelopay.mail.maildir); moves between folders are one
rename. A file is known by its base name, the part before the Maildir ":2,flags" suffix,
which stays the same when a reader moves it new/ → cur/ or changes its flags.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from envelopay.mail.mailbox.inputs import FOLDERS, Folder, check_folder
from envelopay.mail.maildir import deliver_file, ensure_maildir

__all__ = ["MailFolders", "base_name"]


def base_name(name: str) -> str:
    """A Maildir file's lasting name: without the ":2,flags" info suffix."""
    return name.split(":", 1)[0]


class MailFolders:
    """The Maildir folders of one agent's mailbox. `inbox` may be another Maildir (the
    garden's `<root>/<address>/`), read in place."""

    def __init__(self, agent_dir: Path, inbox: Path | None = None) -> None:
        self.root = agent_dir / "mailbox"
        self._inbox = Path(inbox).resolve() if inbox is not None else self.root / "inbox"
        for folder in FOLDERS:
            ensure_maildir(self.path(folder))

    def path(self, folder: str) -> Path:
        if check_folder(folder) == "inbox":
            return self._inbox
        return self.root / folder

    def attachments_dir(self, mid: str) -> Path:
        return self.root / "attachments" / mid

    def store(self, folder: Folder, raw: bytes) -> Path:
        """Write raw bytes into the folder's new/ atomically; return the file."""
        return deliver_file(self.path(folder), raw)

    def dirs(self) -> Iterator[tuple[Folder, Path]]:
        """Every directory that holds message files: each folder's new/ then cur/."""
        for folder in FOLDERS:
            base = self.path(folder)
            for sub in ("new", "cur"):
                yield folder, base / sub

    def files(self) -> Iterator[tuple[Folder, Path]]:
        """Every message file, folder by folder, new/ then cur/, in name order."""
        for folder, directory in self.dirs():
            for entry in sorted(os.listdir(directory)):
                if not entry.startswith("."):
                    yield folder, directory / entry

    def at(self, folder: str, file: str) -> Path:
        """The path of `file` ("new/NAME" or "cur/NAME:2,FLAGS") in the folder."""
        return self.path(folder) / file

    @staticmethod
    def rel(path: Path) -> str:
        """A file's place within its folder: "new/NAME" or "cur/NAME:2,FLAGS"."""
        return f"{path.parent.name}/{path.name}"

    def locate(self, folder: str, name: str, last_seen: str) -> Path | None:
        """The file with base name `name`: where it was last seen, where a reader moves it
        (new/ → cur/ with ":2," or ":2,S"), and only then a listing (`find`)."""
        base = self.path(folder)
        for rel in (last_seen, f"cur/{name}:2,", f"cur/{name}:2,S", f"new/{name}"):
            if os.path.exists(base / rel):
                return base / rel
        return self.find(folder, name)

    def find(self, folder: str, name: str) -> Path | None:
        """The file with base name `name` in the folder (cur/ first), flags whatever they are."""
        base = self.path(folder)
        for sub in ("cur", "new"):
            direct = base / sub / name
            if direct.exists():
                return direct
            for entry in os.listdir(base / sub):
                if base_name(entry) == name:
                    return base / sub / entry
        return None

    def move(self, src: Path, folder: Folder, flags: str | None = None) -> Path:
        """Rename a file into another folder's cur/: with `flags` set anew, or keeping its own
        (a file from new/ gets the empty ":2," info)."""
        if flags is not None:
            name = f"{base_name(src.name)}:2,{flags}"
        else:
            name = src.name if ":" in src.name else f"{src.name}:2,"
        dst = self.path(folder) / "cur" / name
        os.rename(src, dst)
        return dst
