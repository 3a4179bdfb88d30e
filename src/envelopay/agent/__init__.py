"""envelopay.agent"""
