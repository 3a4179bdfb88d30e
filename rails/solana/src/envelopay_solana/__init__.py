"""envelopay-solana: the Solana rail plugin (SOL and SPL tokens; LiteSVM local chain).

Entry point ``solana = "envelopay_solana.rail:make_rail"`` in the group
``envelopay.rails``. Import this package lazily: it pulls in solders and solana-py.
"""

from envelopay_solana.local import LocalSolana
from envelopay_solana.rail import SolanaRail, canonical_signature, make_rail

__all__ = ["LocalSolana", "SolanaRail", "canonical_signature", "make_rail"]
