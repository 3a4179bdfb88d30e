"""Clients of the spend enforcer's routes: `PaymentClient` (an agent token: pay, pay
invoices, offer, accept, balances, payment status) and `SpendOperatorClient` (the
operator's spend policy and wallets). Verdicts come back as values; only an unreachable or
misbehaving service raises TransportError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from envelopay.enforcer.client.http_client import OperatorClient, _Http, answer
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.errors import ConfigError, TransportError, UsageError

__all__ = ["PaymentClient", "SpendOperatorClient"]


class PaymentClient(_Http):
    async def submit(self, kind: str, request: Mapping[str, Any]) -> PaymentDisposition:
        """kind: pay | pay_invoice | offer | accept."""
        status, data = await self._call("POST", f"/v1/{kind}", dict(request))
        return self._disposition(status, data)

    async def status(self, intent_id: str) -> PaymentDisposition:
        status, data = await self._call("GET", f"/v1/payments/{quote(intent_id, safe='')}")
        return self._disposition(status, data)

    async def balances(self) -> dict[str, Any]:
        status, data = await self._call("GET", "/v1/balances")
        if status != 200 or not isinstance(data, dict):
            raise TransportError(f"enforcer answered HTTP {status}: {data!r}")
        return data

    @staticmethod
    def _disposition(status: int, data: Any) -> PaymentDisposition:
        return answer(status, data, PaymentDisposition.from_json)


class SpendOperatorClient(OperatorClient):
    async def _ok(self, method: str, path: str, body: Any = None, accept: tuple[int, ...] = (200,)) -> Any:
        return await super()._ok(method, path, body, (*accept, 409))

    @staticmethod
    def _enabled(data: Any) -> Any:
        """An enforcer without payments says so (409 payments_disabled): a configuration
        matter, named with the options that enable payments."""
        if isinstance(data, dict) and data.get("code") == "payments_disabled":
            raise ConfigError(str(data.get("error", "payments_disabled")))
        return data

    async def get_policy(self, name: str) -> dict[str, Any]:
        path = f"/v1/agents/{quote(name, safe='')}/policy"
        data = self._enabled(await self._ok("GET", path, accept=(200, 404)))
        if "policy" not in data:
            raise UsageError(f"no agent {name!r}")
        return dict(data["policy"])

    async def set_policy(self, name: str, policy: Mapping[str, Any]) -> dict[str, Any]:
        data = self._enabled(await self._ok(
            "PUT", f"/v1/agents/{quote(name, safe='')}/policy", dict(policy), accept=(200, 404)
        ))
        if "policy" not in data:
            raise UsageError(f"no agent {name!r}")
        return dict(data["policy"])

    async def wallets(self, name: str) -> list[dict[str, Any]]:
        data = self._enabled(await self._ok("GET", f"/v1/agents/{quote(name, safe='')}/wallets"))
        return list(data["wallets"])

    async def add_wallet(
        self, name: str, chain: str, *, label: str = "default", import_file: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"chain": chain, "label": label}
        if import_file is not None:
            body["import_file"] = import_file
        data = self._enabled(
            await self._ok("POST", f"/v1/agents/{quote(name, safe='')}/wallets", body, accept=(201,))
        )
        return dict(data["wallet"])

    async def balances(self, name: str) -> dict[str, Any]:
        data = self._enabled(
            await self._ok("GET", f"/v1/agents/{quote(name, safe='')}/balances", accept=(200, 404))
        )
        if "wallets" not in data:
            raise UsageError(f"no agent {name!r}")
        return dict(data)
