"""envelopay.mail"""
