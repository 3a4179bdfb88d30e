"""DKIM key lookups: the injected DnsLookup, a table for tests and gardens, dnspython."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from envelopay.errors import ConfigError, TransportError

DnsLookup = Callable[[str], Awaitable[str | None]]
"""Fetch the TXT record at a name (no trailing dot): the joined text, or None when the
name or the record does not exist. Raise (any exception) for a temporary failure."""


class DnsTemporaryError(TransportError):
    """A DNS lookup failed for a reason that may pass (timeout, SERVFAIL)."""


def table_dns(records: Mapping[str, str]) -> DnsLookup:
    """A DnsLookup backed by a dict name→TXT; names absent from the dict don't exist.

    A value of the form "!temperror" makes the lookup fail temporarily (for tests)."""
    table = {k.rstrip(".").lower(): v for k, v in records.items()}

    async def lookup(name: str) -> str | None:
        value = table.get(name.rstrip(".").lower())
        if value == "!temperror":
            raise DnsTemporaryError(f"lookup of {name} failed temporarily")
        return value

    return lookup


def resolver_dns(timeout: float = 5.0, *, nameservers: list[str] | None = None, port: int = 53) -> DnsLookup:
    """A DnsLookup on dnspython's asyncio resolver (resolv.conf unless nameservers given)."""
    # lazy: keeps dns off this module's import
    import dns.asyncresolver
    import dns.exception
    import dns.resolver

    try:
        resolver = dns.asyncresolver.Resolver(configure=nameservers is None)
    except dns.resolver.NoResolverConfiguration as exc:
        raise ConfigError("no DNS resolver configured (resolv.conf) for DKIM key lookups") from exc
    if nameservers is not None:
        resolver.nameservers = list(nameservers)
        resolver.port = port
    resolver.lifetime = timeout

    async def lookup(name: str) -> str | None:
        try:
            answer = await resolver.resolve(name.rstrip(".") + ".", "TXT")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None
        except dns.exception.DNSException as exc:
            raise DnsTemporaryError(f"{name}: {type(exc).__name__}") from exc
        # A TXT record's character-strings are one value joined without separators.
        for rdata in answer:
            return b"".join(rdata.strings).decode("ascii", "replace")
        return None

    return lookup
