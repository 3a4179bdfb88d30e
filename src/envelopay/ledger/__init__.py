"""envelopay.ledger"""
