"""Attachments: received ones extracted under safe names, outgoing ones confined to the
agent's directory.

Received attachments are written to `mailbox/attachments/<id>/`, one file each, under a
sanitised base name (duplicates get a `-2`, `-3` suffix); our own sent copies are only
listed. A file to attach must resolve (symlinks followed) inside the agent's directory.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from envelopay.mail.mailbox.inputs import MailboxError
from envelopay.mail.mailbox.records import Attachment

__all__ = ["attachment_source", "extract", "remove_extracted", "safe_filename"]

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]")


def safe_filename(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _SAFE_NAME.sub("_", base).strip(" .") or "attachment"
    return base[:120]


def extract(target: Path, agent_dir: Path, parts: list[tuple[str, str, bytes]]) -> list[Attachment]:
    """Write each (filename, content type, bytes) part into `target`; paths are relative
    to `agent_dir`."""
    out: list[Attachment] = []
    if not parts:
        return out
    target.mkdir(parents=True, exist_ok=True)
    used: set[str] = set()
    for filename, ctype, data in parts:
        safe = safe_filename(filename)
        stem, dot, ext = safe.rpartition(".")
        candidate, k = safe, 1
        while candidate in used:  # duplicate basenames get a suffix
            k += 1
            candidate = f"{stem}-{k}.{ext}" if dot else f"{safe}-{k}"
        used.add(candidate)
        (target / candidate).write_bytes(data)
        out.append(Attachment(filename, ctype, len(data), str((target / candidate).relative_to(agent_dir))))
    return out


def remove_extracted(target: Path, *, ignore_errors: bool = False) -> None:
    if target.is_dir():
        shutil.rmtree(target, ignore_errors=ignore_errors)


def attachment_source(agent_dir: Path, p: str | Path) -> Path:
    """An attachment path must resolve (symlinks followed) inside the agent's directory."""
    given = Path(p)
    if not given.is_absolute():
        given = agent_dir / given
    resolved = given.resolve()
    if not resolved.is_relative_to(agent_dir):
        raise MailboxError(
            "attachment_outside", f"{p} is outside the agent directory {agent_dir}", "attachments"
        )
    if not resolved.is_file():
        raise MailboxError("attachment_missing", f"{p} is not a readable file", "attachments")
    return resolved
