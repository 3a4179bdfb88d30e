"""envelopay: the reference implementation of the Envelopay protocol.

The public API is exactly `__all__`; a test pins it.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
