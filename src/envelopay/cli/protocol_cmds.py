"""CLI commands for this area (registered by envelopay.cli.app)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    _ = app
