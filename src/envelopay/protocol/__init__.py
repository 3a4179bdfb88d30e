"""Sans-IO Envelopay protocol: grammar, message models, parse and compose.

This package never imports I/O layers (mail, ledger, agent) or chain libraries.
"""
