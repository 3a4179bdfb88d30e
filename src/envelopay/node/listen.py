"""Where `worker serve`'s HTTP pages listen (`--console`, `--metrics`): the option as
typed, and an aiohttp app served there with the URL it is reached at."""

from __future__ import annotations

from aiohttp import web

from envelopay.errors import UsageError
from envelopay.mail.transport.lmtp_client import tcp_port

__all__ = ["http_endpoint", "serve_app"]


def http_endpoint(option: str, text: str) -> tuple[str, int]:
    """`option`'s value as typed: PORT (loopback) or HOST:PORT ([::1]:PORT for IPv6); port 0
    lets the system choose. UsageError names the option and what is wrong."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.removeprefix("[").removesuffix("]")
    number = 0 if port == "0" else tcp_port(port)
    if not host or number is None:
        raise UsageError(f"{option} {text!r}: PORT or HOST:PORT, a port from 0 to 65535")
    return host, number


async def serve_app(app: web.Application, host: str, port: int, path: str) -> tuple[web.AppRunner, str]:
    """Serve `app` on host:port; return the runner (call `cleanup()`) and the URL of `path`
    on the port it bound (the system's choice for port 0)."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    sockets = getattr(site._server, "sockets", None) or []
    bound = sockets[0].getsockname()[1] if sockets else port
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}{path}"
