"""The webhook endpoint `envelopay worker serve` listens on for an AgentMail inbox.

Loopback by default: the operator puts whatever terminates TLS in front of it (a
reverse proxy, a tunnel). One route, POST `path`; the body is read as bytes, exactly
as signed, and the answer is the inbox's (200 handled or duplicate, 401 refused
signature, 400 not an event, 503 retry later).
"""

from __future__ import annotations

import socket

from aiohttp import web

from envelopay.mail.agentmail.inbox import AgentMailInbox

__all__ = ["DEFAULT_PATH", "WebhookServer", "webhook_app"]

DEFAULT_PATH = "/webhooks/agentmail"
_MAX_BODY = 1024 * 1024  # an event is metadata; the message itself is fetched raw


def webhook_app(inbox: AgentMailInbox, path: str = DEFAULT_PATH) -> web.Application:
    async def deliver(request: web.Request) -> web.Response:
        body = await request.read()
        answer = await inbox.on_webhook(dict(request.headers), body)
        return web.json_response(dict(answer.body), status=answer.status)

    app = web.Application(client_max_size=_MAX_BODY)
    app.router.add_post(path, deliver)
    return app


class WebhookServer:
    def __init__(self, inbox: AgentMailInbox, host: str = "127.0.0.1", port: int = 0,
                 path: str = DEFAULT_PATH) -> None:
        self.inbox, self.host, self.port, self.path = inbox, host, port, path
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(webhook_app(self.inbox, self.path), access_log=None)
        await self._runner.setup()
        if self.port == 0:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((self.host, 0))
                self.port = int(s.getsockname()[1])
        await web.TCPSite(self._runner, self.host, self.port).start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}{self.path}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
