"""envelopay-base rail plugin."""
