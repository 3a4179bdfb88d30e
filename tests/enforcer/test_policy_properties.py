"""Property: whatever an agent puts in the fields, a request is either refused as a value
or composes to a message with exactly the one recipient and no injected header."""

from __future__ import annotations

import email
from datetime import UTC, datetime
from email import policy as email_policy
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from envelopay.enforcer.send.mime import compose_request
from envelopay.enforcer.send.model import Disposition, SendRequest
from envelopay.enforcer.send.policy import check_request

nasty = st.sampled_from(["\r\n", "\n", "\r", ",", " ", "Bcc: eve@evil.test", "<", ">", "@", "\x00", "é", ":"])


VALID: dict[str, Any] = {
    "to": "bob@partner.test",
    "from": "a1@agents.test",
    "subject": "Quarterly report",
    "text": "hello\nthere",
    "reply_to": "a1@agents.test",
    "in_reply_to": "<x1@partner.test>",
    "references": ["<x0@partner.test>", "<x1@partner.test>"],
}


def _mutate(field: str, pos: int, bad: str, retype: Any) -> dict[str, Any]:
    """The valid request with one field tampered with: something inserted, or retyped."""
    raw = {**VALID, "agent_id": "someone-else"}
    if retype is not None:
        raw[field] = retype
    elif isinstance(raw[field], list):
        refs = list(raw[field])
        refs[pos % len(refs)] = refs[pos % len(refs)][: pos % 10] + bad + refs[pos % len(refs)][pos % 10 :]
        raw[field] = refs
    else:
        v = raw[field]
        raw[field] = v[: pos % (len(v) + 1)] + bad + v[pos % (len(v) + 1) :]
    return raw


requests = st.builds(
    _mutate,
    st.sampled_from(sorted(VALID)),
    st.integers(0, 40),
    st.lists(nasty, min_size=1, max_size=3).map("".join),
    st.one_of(*[st.none()] * 6, st.integers(), st.lists(st.text(max_size=5), max_size=2),
              st.text(max_size=5)),
)


@settings(max_examples=400, deadline=None)
@given(requests)
def test_any_request_is_refused_or_composes_safely(raw: dict[str, Any]) -> None:
    raw.setdefault("subject", "s")
    event("accepted" if isinstance(check_request(raw), SendRequest) else "refused")
    result = check_request(raw)
    if isinstance(result, Disposition):
        assert result.status == "blocked" and result.reason
        return
    assert isinstance(result, SendRequest)
    data = compose_request(result, message_id="<m@agents.test>", date=datetime(2027, 1, 1, tzinfo=UTC),
                           agent_name="a1")
    msg = email.message_from_bytes(data, policy=email_policy.default)
    assert msg.get_all("To") == [result.to]
    for name in ("Bcc", "Cc"):
        assert msg.get_all(name) is None
    names = [n.lower() for n in msg.keys()]  # noqa: SIM118 - Message has no __iter__ over names
    allowed = {"from", "to", "subject", "date", "message-id", "in-reply-to", "references", "reply-to",
               "x-envelopay-agent", "mime-version", "content-type", "content-transfer-encoding"}
    assert set(names) <= allowed and len(names) == len(set(names))
