"""envelopay.testing"""
