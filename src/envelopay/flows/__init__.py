"""envelopay.flows"""
