"""envelopay.rails"""
