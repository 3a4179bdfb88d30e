"""Typer front end. No protocol logic lives here."""
