"""Deprecated: `envelopay.agent.client` moved to `envelopay.client.buyer`.

    envelopay.client.buyer               Answer, ClientApp, build, check_address, follow,
                                         parse_json_option, pay_first

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.client.buyer import (
    Answer,
    ClientApp,
    build,
    check_address,
    follow,
    parse_json_option,
    pay_first,
)

__all__ = [
    "Answer",
    "ClientApp",
    "build",
    "check_address",
    "follow",
    "parse_json_option",
    "pay_first",
]

warnings.warn(
    "envelopay.agent.client is deprecated; import from envelopay.client.buyer instead",
    DeprecationWarning,
    stacklevel=2,
)
