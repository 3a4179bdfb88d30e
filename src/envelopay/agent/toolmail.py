"""Deprecated: `envelopay.agent.toolmail` moved to `envelopay.endpoints.toolmail`.

    envelopay.endpoints.toolmail         CALL_HEADER, MAX_PAYLOAD, PayloadProblem, ToolMail,
                                         build_tool_mail, read_tool_mail

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.endpoints.toolmail import (
    CALL_HEADER,
    MAX_PAYLOAD,
    PayloadProblem,
    ToolMail,
    build_tool_mail,
    read_tool_mail,
)

__all__ = [
    "CALL_HEADER",
    "MAX_PAYLOAD",
    "PayloadProblem",
    "ToolMail",
    "build_tool_mail",
    "read_tool_mail",
]

warnings.warn(
    "envelopay.agent.toolmail is deprecated; import from envelopay.endpoints.toolmail instead",
    DeprecationWarning,
    stacklevel=2,
)
