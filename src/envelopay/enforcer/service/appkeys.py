"""The aiohttp application keys the enforcer's service and its console share (their own
module, so the console's module and server.py need not import each other)."""

from __future__ import annotations

from aiohttp import web

from envelopay.enforcer.send.enforcer import Enforcer

__all__ = ["ENFORCER"]

ENFORCER: web.AppKey[Enforcer] = web.AppKey("enforcer", Enforcer)
