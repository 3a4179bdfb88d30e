"""The garden's LMTP reply texts: `shown` (anything quoted back made printable ASCII) and
the fixed refusals both the garden's handler and its LMTP session answer with."""

from __future__ import annotations

import re

__all__ = ["BUSY", "NON_ASCII_COMMAND", "SIMPLE_ANGLE_ADDR", "STRICT_ASCII", "shown"]


def shown(text: str) -> str:
    """`text` as printable ASCII for a reply line: anything else escaped (\\u200b, \\udcff,
    \\r). A reply is ASCII (RFC 5321 4.2; this garden offers no SMTPUTF8), and an address
    quoted back must not break it into lines."""
    return "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text)


# `<local@domain>` with both parts dot-atoms (RFC 5322 3.2.3): the form our own
# clients send, then parameters. For it the address is the text between the brackets
# and the parameters follow the white space: exactly what aiosmtpd's full parser
# returns. Anything else (comments included) goes through that parser.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
SIMPLE_ANGLE_ADDR = re.compile(rf"<({_ATEXT}(?:\.{_ATEXT})*@{_ATEXT}(?:\.{_ATEXT})*)>(.*)", re.DOTALL)


# aiosmtpd's answer to a command line that is not ASCII (it offers no SMTPUTF8 here), read
# before any hook runs. RFC 6531 gives such addresses X.6.7 ("Non-ASCII addresses not
# permitted for that sender/recipient"); 501 is a syntax error in the parameters (RFC 5321 4.2.3).
STRICT_ASCII = "500 Error: strict ASCII mode"
BUSY = "421 4.7.0 too many connections, try again later"
NON_ASCII_COMMAND = "501 5.6.7 non-ASCII in a command: this garden takes ASCII addresses only (no SMTPUTF8)"
