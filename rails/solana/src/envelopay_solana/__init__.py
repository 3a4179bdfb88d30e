"""envelopay-solana rail plugin."""
