"""AgentMail's REST API, spoken with httpx (https://docs.agentmail.to/api-reference).

Only what the transport needs: send a new message, reply to one, read one, fetch its
raw RFC 5322 bytes, list an inbox (the polling fallback) and add or remove labels.

    POST  /v0/inboxes/{inbox}/messages/send            api-reference/inboxes/messages/send
    POST  /v0/inboxes/{inbox}/messages/{id}/reply      api-reference/inboxes/messages/reply
    GET   /v0/inboxes/{inbox}/messages/{id}            api-reference/inboxes/messages/get
    GET   /v0/inboxes/{inbox}/messages/{id}/raw        api-reference/inboxes/messages/get-raw
    GET   /v0/inboxes/{inbox}/messages                 api-reference/inboxes/messages/list
    PATCH /v0/inboxes/{inbox}/messages/{id}            api-reference/inboxes/messages/update

Why httpx and not the official `agentmail` SDK (2.0.18 on PyPI, MIT): the API has no
raw-MIME send, so the SDK cannot give us more than the REST calls; its `get_raw`
returns the signed download URL and leaves the download to us; and the transport must
control timeouts, retries and error classes itself (a 4xx is permanent, a 429/5xx or a
broken connection is not). The SDK's pydantic models are used in the tests, to check
that the fixtures we answer with are shapes the SDK itself accepts.

The API key is read by the caller from an environment variable named in the config;
it is sent only to the API's own host, never to a raw message's download URL.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from envelopay.errors import TransportError

__all__ = [
    "API_BASE",
    "AgentMailClient",
    "AgentMailConfig",
    "AgentMailError",
    "Attachment",
    "MessageItem",
    "SentRef",
]

API_BASE = "https://api.agentmail.to"
_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


class AgentMailError(TransportError):
    """The API refused or failed. `permanent` (a 4xx other than 408/425/429): do not retry."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.permanent = status is not None and status not in _RETRYABLE and 400 <= status < 500


@dataclass(frozen=True, slots=True)
class AgentMailConfig:
    inbox_id: str  # the inbox's id, which is its address (e.g. "worker@agentmail.to")
    api_key: str
    base_url: str = API_BASE
    timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str
    content_type: str
    content: bytes

    def wire(self) -> dict[str, str]:
        # "Base64 encoded content of the attachment" (SendAttachment).
        return {"filename": self.filename, "content_type": self.content_type,
                "content": base64.b64encode(self.content).decode("ascii")}


@dataclass(frozen=True, slots=True)
class SentRef:
    """What send/reply answer (SendMessageResponse): AgentMail's ids for the new message."""

    message_id: str
    thread_id: str


@dataclass(frozen=True, slots=True)
class MessageItem:
    """The parts of a listed message (MessageItem) the polling fallback uses."""

    message_id: str
    thread_id: str
    labels: tuple[str, ...]
    timestamp: str
    sender: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


def _id(value: str) -> str:
    # Message ids may be RFC 5322 ids ("<…@…>"): escape everything in a path segment.
    return quote(value, safe="")


class AgentMailClient:
    def __init__(self, config: AgentMailConfig, *, client: httpx.AsyncClient | None = None) -> None:
        self.config = config
        self._own = client is None
        self._http = client or httpx.AsyncClient(timeout=config.timeout)
        self._base = config.base_url.rstrip("/")

    @property
    def inbox(self) -> str:
        return self.config.inbox_id

    def _url(self, *parts: str) -> str:
        return "/".join([self._base, "v0", "inboxes", _id(self.inbox), *parts])

    async def _call(self, method: str, url: str, *, json: Any = None, params: Any = None,
                    headers: Mapping[str, str] | None = None) -> httpx.Response:
        hdrs = {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json",
                **(headers or {})}
        try:
            resp = await self._http.request(method, url, json=json, params=params, headers=hdrs)
        except httpx.HTTPError as exc:
            where = f"AgentMail {method} {urlsplit(url).path}"
            raise AgentMailError(f"{where}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code >= 400:
            raise _error(method, url, resp)
        return resp

    @staticmethod
    def _json(resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except ValueError as exc:
            status = resp.status_code
            raise AgentMailError(f"AgentMail answered {status} without JSON", status=status) from exc
        if not isinstance(data, dict):
            raise AgentMailError("AgentMail answered JSON that is not an object", status=resp.status_code)
        return data

    # -- out
    async def send(
        self,
        *,
        to: Sequence[str],
        subject: str,
        text: str,
        attachments: Sequence[Attachment] = (),
        headers: Mapping[str, str] | None = None,
        labels: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> SentRef:
        body: dict[str, Any] = {"to": list(to), "subject": subject, "text": text}
        return await self._post_message(self._url("messages", "send"), body, attachments, headers,
                                        labels, idempotency_key)

    async def reply(
        self,
        message_id: str,
        *,
        text: str,
        to: Sequence[str] = (),
        attachments: Sequence[Attachment] = (),
        headers: Mapping[str, str] | None = None,
        labels: Sequence[str] = (),
        idempotency_key: str | None = None,
    ) -> SentRef:
        body: dict[str, Any] = {"text": text}
        if to:
            body["to"] = list(to)
        return await self._post_message(self._url("messages", _id(message_id), "reply"), body,
                                        attachments, headers, labels, idempotency_key)

    async def _post_message(self, url: str, body: dict[str, Any], attachments: Sequence[Attachment],
                            headers: Mapping[str, str] | None, labels: Sequence[str],
                            idempotency_key: str | None) -> SentRef:
        if attachments:
            body["attachments"] = [a.wire() for a in attachments]
        if headers:
            body["headers"] = dict(headers)
        if labels:
            body["labels"] = list(labels)
        # "A retry carrying the same key returns the original message instead of sending
        # a second email" (send: Idempotency-Key; keys expire 24 h after the send).
        extra = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        data = self._json(await self._call("POST", url, json=body, headers=extra))
        mid, tid = data.get("message_id"), data.get("thread_id")
        if not isinstance(mid, str) or not isinstance(tid, str):
            raise AgentMailError("send answer lacks message_id/thread_id")
        return SentRef(mid, tid)

    # -- in
    async def get_message(self, message_id: str) -> dict[str, Any]:
        return self._json(await self._call("GET", self._url("messages", _id(message_id))))

    async def raw(self, message_id: str) -> bytes:
        """The message's raw bytes, as received (so DKIM and our parser see them).

        The current API answers a JSON object with a short-lived `download_url`
        (RawMessageResponse); an older revision answered the file itself. Both work."""
        resp = await self._call("GET", self._url("messages", _id(message_id), "raw"))
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return resp.content
        data = self._json(resp)
        url = data.get("download_url")
        if not isinstance(url, str) or urlsplit(url).scheme != "https":
            raise AgentMailError("raw message answer lacks an https download_url")
        try:
            # A pre-signed URL on another host: no Authorization header goes there.
            got = await self._http.get(url, headers={"Accept": "message/rfc822, */*"})
        except httpx.HTTPError as exc:
            raise AgentMailError(f"raw message download: {type(exc).__name__}: {exc}") from exc
        if got.status_code >= 400:
            raise AgentMailError(f"raw message download answered {got.status_code}", status=got.status_code)
        size = data.get("size")
        if isinstance(size, int) and size != len(got.content):
            raise AgentMailError(f"raw message is {len(got.content)} bytes, the API said {size}")
        return got.content

    async def list_messages(
        self,
        *,
        labels: Sequence[str] = (),
        after: datetime | None = None,
        ascending: bool = True,
        limit: int = 50,
        page_token: str | None = None,
    ) -> tuple[list[MessageItem], str | None]:
        params = [("limit", str(limit)), ("ascending", "true" if ascending else "false")]
        params += [("labels", label) for label in labels]
        if after is not None:
            params.append(("after", after.isoformat()))
        if page_token:
            params.append(("page_token", page_token))
        data = self._json(await self._call("GET", self._url("messages"), params=params))
        items = []
        for m in data.get("messages") or []:
            if isinstance(m, dict) and isinstance(m.get("message_id"), str):
                items.append(MessageItem(
                    message_id=m["message_id"], thread_id=str(m.get("thread_id", "")),
                    labels=tuple(x for x in m.get("labels") or [] if isinstance(x, str)),
                    timestamp=str(m.get("timestamp", "")), sender=str(m.get("from", "")), extra=m,
                ))
        token = data.get("next_page_token")
        return items, token if isinstance(token, str) and token else None

    async def label(self, message_id: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()) -> None:
        body: dict[str, Any] = {}
        if add:
            body["add_labels"] = list(add)
        if remove:
            body["remove_labels"] = list(remove)
        await self._call("PATCH", self._url("messages", _id(message_id)), json=body)

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()


def _error(method: str, url: str, resp: httpx.Response) -> AgentMailError:
    name = code = detail = None
    try:
        data = resp.json()
        if isinstance(data, dict):  # ErrorResponse: name, message, code
            name, detail, code = data.get("name"), data.get("message"), data.get("code")
    except ValueError:
        detail = resp.text[:200]
    what = f"AgentMail {method} {urlsplit(url).path} answered {resp.status_code}"
    if name or detail:
        what += f": {name or ''} {detail or ''}".rstrip()
    return AgentMailError(what, status=resp.status_code, code=code if isinstance(code, str) else None)
