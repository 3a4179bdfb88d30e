"""How a message is stored in a Maildir file: LF line ends when that is exact.

Mail on the wire is CRLF (SMTP and LMTP DATA, RFC 5321 §2.3.8, RFC 2033), but
Dovecot and mutt expect a Maildir file to end its lines with LF (mutt shows a stray ^M
otherwise). So a message is stored with LF, and read back as CRLF — the exact bytes
received, which DKIM and the evidence are computed on. The one ambiguity is a bare LF in
the received bytes: on disk it could not be told from a converted CRLF. So only a message
whose every LF follows a CR is stored as LF, and its name says so with Dovecot's
`,W=<size>` (the size with CRLF line ends); one with a bare LF is stored exactly as
received, without `,W=`, and read back as stored (`to_disk`, `from_disk`).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["from_disk", "read_message", "to_disk"]

_WIRE_SIZE = re.compile(r",W=(\d+)")


def to_disk(wire: bytes) -> tuple[bytes, str]:
    """The bytes to store for `wire` and the name suffix that says how: LF line ends and
    `,W=<len(wire)>` when every LF in `wire` ends a CRLF, else `wire` itself and ""."""
    if wire.count(b"\n") != wire.count(b"\r\n"):  # a bare LF: LF on disk would be ambiguous
        return wire, ""
    return wire.replace(b"\r\n", b"\n"), f",W={len(wire)}"


def from_disk(name: str, stored: bytes) -> bytes:
    """The bytes as received of a file named `name` holding `stored`."""
    found = _WIRE_SIZE.search(name.split(":", 1)[0])
    return stored if found is None else stored.replace(b"\n", b"\r\n")


def read_message(path: Path) -> bytes:
    """A stored message's bytes as received (CRLF), whatever its folder and flags."""
    return from_disk(path.name, path.read_bytes())
