"""`envelopay approvals show ID` and `approvals approve ID --hash` against a real
`envelopay enforcer serve` process: the same content as the console, bound by its hash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from envelopay.enforcer.client.http_client import EnforcerClient

from .test_cli import _Keep, cli, served, smtp  # noqa: F401  (fixtures: a served enforcer, its SMTP sink)

BODY = "Dear Carol,\n\nwe would like to buy your customer list.\n\n-- sdr"


def test_approvals_show_and_a_bound_approve(served: tuple[str, Path], smtp: tuple[_Keep, int]) -> None:  # noqa: F811
    url, token_file = served
    common = ["--enforcer", url, "--operator-token-file", str(token_file)]
    r = cli("agent", "create", "sdr", "--address", "sdr@agents.test", *common, "--json")
    assert r.exit_code == 0, r.output
    token = json.loads(r.output)["token"]

    async def held() -> str:
        async with EnforcerClient(url, token) as client:
            d = await client.send({"to": "carol@partner.test", "from": "sdr@agents.test", "text": BODY,
                                   "subject": "Your customer list", "in_reply_to": "<t1@partner.test>"})
            return d.approval_id or ""

    approval = asyncio.run(held())
    assert approval
    r = cli("approvals", "show", approval, *common)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith(f"{approval}  PENDING  mail of sdr: ")
    assert "subject      Your customer list" in lines and "in reply to  <t1@partner.test>" in lines
    assert "to           carol@partner.test" in lines and r.output.rstrip("\n").endswith(BODY)

    r = cli("approvals", "show", approval, *common, "--json")
    doc = json.loads(r.output)
    assert doc["command"] == "approvals show" and doc["approval"]["content"]["text"] == BODY
    shown = doc["approval"]["content_hash"]
    assert f"hash         {shown}" in lines

    r = cli("approvals", "approve", approval, "--hash", "sha256:" + "f" * 64, *common)
    assert r.exit_code == 1 and "conflict: the approval is PENDING (content_changed" in r.output, r.output
    assert smtp[0].messages == []
    r = cli("approvals", "approve", approval, "--hash", shown, *common)
    assert r.exit_code == 0 and "SENT" in r.output, r.output
    assert len(smtp[0].messages) == 1 and b"we would like to buy your customer list." in smtp[0].messages[0]

    r = cli("approvals", "show", "no-such-id", *common)
    assert r.exit_code == 2 and "no approval no-such-id" in r.output
