"""envelopay-base: the Base (EVM) rail plugin for envelopay.

`make_rail(options)` is the entry point (group `envelopay.rails`, name `base`);
`LocalChain` is the in-process eth-tester chain with the local USDC token.
Chain libraries (web3, eth-tester) are imported only when a backend needs them.
"""

from envelopay_base.local import LocalChain
from envelopay_base.rail import BaseRail, make_rail

__all__ = ["BaseRail", "LocalChain", "make_rail"]
