"""What every store stands on, whatever it keeps: rows read by column name, and one
migrator (versioned steps per store, one table of applied versions per database)."""

from envelopay.persist.migrator import (
    LOCK_KEY,
    VERSIONS_TABLE,
    Dialect,
    Migrations,
    Step,
    Tx,
    current,
    migrate,
    migrate_in_runs,
)
from envelopay.persist.rows import NamedRow

__all__ = [
    "LOCK_KEY",
    "VERSIONS_TABLE",
    "Dialect",
    "Migrations",
    "NamedRow",
    "Step",
    "Tx",
    "current",
    "migrate",
    "migrate_in_runs",
]
