"""Quick mail: the messages that ask or tell where things stand, move no money and take on
no work — WHICH, METHODS, and the status extension's WAIT and WHATSUP. A node lets them
pass bulk mail: the pump serves one beside the messages already being served
(node/lanes.py), the outbox sends one without waiting for a free sending slot, and the
garden pool keeps a connection for them (mail/transport/garden.py). A scheduling hint
only: a message read as quick is handled exactly as any other, and one misread (or an
attacker's burst of WHICHs) changes only when it is served, within a bounded number of
extra slots.
"""

from __future__ import annotations

__all__ = ["QUICK_KEYWORDS", "is_quick_mail", "is_quick_type"]

# Spec "Message types": WHICH / METHODS (discovery); WAIT / WHATSUP (SPEC "Status").
QUICK_KEYWORDS = frozenset({b"WHICH", b"METHODS", b"WAIT", b"WHATSUP"})
_QUICK_TYPES = frozenset(k.decode().lower() for k in QUICK_KEYWORDS)
_HEAD_MAX = 16 * 1024  # a subject further down than this is not looked for


def is_quick_type(message_type: str) -> bool:
    """An outgoing message's type ("which", "methods", …) is quick mail."""
    return message_type.lower() in _QUICK_TYPES


def is_quick_mail(raw: bytes) -> bool:
    """The Subject of `raw` is a quick keyword, alone or before ` | note` (spec "Subject
    line"). Reads the header block only, without decoding or unfolding; never raises."""
    head = raw[:_HEAD_MAX]
    for end in (head.find(b"\r\n\r\n"), head.find(b"\n\n")):
        if end >= 0:
            head = head[:end]
    for line in head.split(b"\n"):
        if line[:8].lower() == b"subject:":
            return line[8:].split(b"|", 1)[0].strip().upper() in QUICK_KEYWORDS
    return False
