"""Building payment transactions (shared by the local and RPC backends)."""

from __future__ import annotations

from solders.hash import Hash
from solders.instruction import Instruction
from solders.keypair import Keypair
from solders.message import Message
from solders.pubkey import Pubkey
from solders.system_program import TransferParams as SysTransfer
from solders.system_program import transfer as sys_transfer
from solders.transaction import Transaction
from spl.token.instructions import (
    create_idempotent_associated_token_account,
    get_associated_token_address,
    transfer_checked,
)
from spl.token.models import TransferCheckedParams

from envelopay.rails.interface import AssetInfo
from envelopay_solana.assets import TOKEN_PROGRAM

SIGNATURE_FEE = 5000  # lamports per signature (one signer)
TOKEN_ACCOUNT_SIZE = 165


def ata(wallet: Pubkey, asset: AssetInfo) -> Pubkey:
    assert asset.address is not None
    program = Pubkey.from_string(asset.program or TOKEN_PROGRAM)
    return get_associated_token_address(wallet, Pubkey.from_string(asset.address), program)


def payment_instructions(
    payer: Pubkey, recipient: Pubkey, asset: AssetInfo, amount: int, *, create_ata: bool
) -> list[Instruction]:
    """SOL: one System transfer. SPL: (create the recipient's ATA idempotently,) then
    transferChecked from the payer's ATA to the recipient's ATA (mint and decimals bound)."""
    if asset.native:
        return [sys_transfer(SysTransfer(from_pubkey=payer, to_pubkey=recipient, lamports=amount))]
    assert asset.address is not None
    program = Pubkey.from_string(asset.program or TOKEN_PROGRAM)
    mint = Pubkey.from_string(asset.address)
    out: list[Instruction] = []
    if create_ata:
        out.append(create_idempotent_associated_token_account(payer, recipient, mint, program))
    out.append(
        transfer_checked(
            TransferCheckedParams(
                program_id=program,
                source=ata(payer, asset),
                mint=mint,
                dest=ata(recipient, asset),
                owner=payer,
                amount=amount,
                decimals=asset.decimals,
                signers=[],
            )
        )
    )
    return out


def sign(instructions: list[Instruction], payer: Keypair, blockhash: Hash) -> Transaction:
    message = Message.new_with_blockhash(instructions, payer.pubkey(), blockhash)
    return Transaction([payer], message, blockhash)
