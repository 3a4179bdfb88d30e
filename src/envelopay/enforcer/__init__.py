"""envelopay.enforcer"""
