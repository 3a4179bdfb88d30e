"""An agent's private contact book: a JSON file replaced atomically on every write.

Each write goes to a temporary file in the same directory, is flushed and fsynced,
then `os.replace`d over the book, so a reader sees the old book or the new one, never
half of either (seed agent-mailbox-actions-and-storage: "Contact writes use a
temporary file and atomic replacement").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from envelopay.errors import UsageError
from envelopay.mail.addresses import require_address
from envelopay.mail.atomic import atomic_write_json
from envelopay.protocol import outside_json

__all__ = ["Contact", "ContactBook", "atomic_write_json"]

_MAX_TEXT = 500


@dataclass(frozen=True, slots=True)
class Contact:
    address: str
    name: str = ""
    note: str = ""


def _text(field: str, value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise UsageError(f"{field}: CR, LF or NUL is not allowed")
    if len(value) > _MAX_TEXT:
        raise UsageError(f"{field}: longer than {_MAX_TEXT} characters")
    return value


class ContactBook:
    """Contacts keyed by bare address (one address per contact, validated)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _load(self) -> dict[str, Contact]:
        try:
            data = outside_json.loads(self.path.read_bytes())  # deep, huge, not UTF-8: refused
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise UsageError(f"contacts: {self.path} is not valid JSON: {exc}") from exc
        out: dict[str, Contact] = {}
        for item in data.get("contacts", []) if isinstance(data, dict) else []:
            if isinstance(item, dict) and isinstance(item.get("address"), str):
                out[item["address"]] = Contact(
                    address=item["address"], name=str(item.get("name", "")), note=str(item.get("note", ""))
                )
        return out

    def _save(self, contacts: dict[str, Contact]) -> None:
        items = [asdict(c) for c in sorted(contacts.values(), key=lambda c: c.address)]
        atomic_write_json(self.path, {"contacts": items})

    def list(self) -> list[Contact]:
        return sorted(self._load().values(), key=lambda c: c.address)

    def get(self, address: str) -> Contact | None:
        return self._load().get(require_address(address, field="address").lower())

    def add(self, address: str, name: str = "", note: str = "") -> Contact:
        """Insert or replace the contact for `address`."""
        addr = require_address(address, field="address").lower()
        contact = Contact(addr, _text("name", name), _text("note", note))
        book = self._load()
        book[addr] = contact
        self._save(book)
        return contact

    def edit(self, address: str, *, name: str | None = None, note: str | None = None) -> Contact:
        """Change only the fields given; the contact must exist."""
        addr = require_address(address, field="address").lower()
        book = self._load()
        old = book.get(addr)
        if old is None:
            raise UsageError(f"address: no contact {addr}")
        new = Contact(
            addr,
            _text("name", name) if name is not None else old.name,
            _text("note", note) if note is not None else old.note,
        )
        book[addr] = new
        self._save(book)
        return new

    def remove(self, address: str) -> bool:
        """Delete the contact; False when there was none."""
        addr = require_address(address, field="address").lower()
        book = self._load()
        if book.pop(addr, None) is None:
            return False
        self._save(book)
        return True
