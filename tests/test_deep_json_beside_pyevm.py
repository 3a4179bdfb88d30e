"""Issue 29: JSON nested 200,000 deep, read in a process that imported py-evm (the Base
rail's eth-tester chain does; py-evm sets the recursion limit to 100,000). The decoder's
only guard was the recursion limit: a worker's inbound mail, the enforcer's request body
and a tool endpoint's request then overflowed the C stack — a segfault, one mail taking a
worker down — where they used to raise RecursionError. Each is now refused by its depth
before decoding. A subprocess, so the raised limit does not leak into this one."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import sys
import eth  # noqa: F401  (py-evm: sets the recursion limit to 100,000)
assert sys.getrecursionlimit() >= 100_000
from envelopay.protocol.parse import parse
from envelopay.enforcer.service.request_bodies import decode_send_body
from envelopay.endpoints.toolmail import read_tool_mail
from envelopay.mail.agentmail.webhook import read_event
from envelopay.protocol import outside_json

deep = "[" * 200_000 + "]" * 200_000
body = '{"v":"0.1.0","type":"order","id":"o","task":' + deep + "}"
head = "From: a@b.test\r\nTo: c@d.test\r\nSubject: ORDER\r\nMessage-ID: <x@b.test>\r\n"
for ctype in ("application/json", "text/plain"):
    parsed = parse((head + f"Content-Type: {ctype}\r\n\r\n" + body).encode())
    print(ctype, [p.code.value for p in parsed.problems])
print("enforcer", decode_send_body(('{"to": ' + deep + "}").encode()).code)
fits = "[" * 100_000 + "]" * 100_000  # under the endpoint's 256 KiB; 90,000 levels already overflowed
print("toolmail", read_tool_mail((head + "Content-Type: application/json\r\n\r\n" + fits).encode()).problem)
print("webhook", read_event(("{\"type\": \"event\", \"x\": " + deep + "}").encode()))
try:
    outside_json.loads(deep)
except outside_json.OutsideJsonError as exc:
    print("option", exc.code)
"""


def test_deep_json_is_refused_where_py_evm_raised_the_recursion_limit() -> None:
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])  # -11 was the segfault
    lines = run.stdout.splitlines()
    assert lines == [
        "application/json ['invalid_json']",
        "text/plain ['invalid_json']",
        "enforcer too_deep",
        "toolmail invalid_json",
        "webhook None",
        "option too_deep",
    ], run.stdout
