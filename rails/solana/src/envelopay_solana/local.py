"""`LocalSolana`: an in-process Solana chain on LiteSVM, with local mints and faucets.

Share one instance between every rail of a process (factory option `local_chain`)
so a payer and a verifier see the same chain. Every transaction sent through
`send` is recorded the way a node's transaction history would keep it: the signed
transaction, its status and logs, inner instructions, token balances before and
after, its slot and block time. `lookup` answers with the same jsonParsed document
shape a JSON-RPC node returns, so one pure verifier serves both backends.

Finality: an in-process chain has no forks, so a transaction is `finalized` when
sent unless the caller passes a lower `commitment` (tests use that to model a
transaction that is seen but not yet final) and raises it later with `set_commitment`.
"""

from __future__ import annotations

import hashlib
import re
import struct
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from solders.account import Account
from solders.clock import Clock
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.pubkey import Pubkey
from solders.system_program import CreateAccountParams, create_account
from solders.transaction import Transaction
from solders.transaction_metadata import FailedTransactionMetadata, TransactionMetadata
from spl.token.instructions import (
    create_idempotent_associated_token_account,
    get_associated_token_address,
    initialize_mint2,
    mint_to,
)
from spl.token.models import InitializeMint2Params, MintToParams

from envelopay_solana import x87
from envelopay_solana.assets import (
    ATA_PROGRAM,
    LOCAL_PYUSD_SEED,
    LOCAL_USDC_SEED,
    SYSTEM_PROGRAM,
    TOKEN_2022_PROGRAM,
    TOKEN_PROGRAM,
    TOKEN_PROGRAMS,
)

LAMPORTS_PER_SOL = 1_000_000_000
MINT_SIZE = 82
FAUCET_SEED = hashlib.sha256(b"envelopay-local-faucet").digest()


@dataclass(slots=True)
class SendResult:
    signature: str
    ok: bool
    error: str | None
    logs: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Record:
    doc: dict[str, Any]
    commitment: str


class LocalSolana:
    """A LiteSVM chain with a faucet, a local "USDC" mint (Token program, 6 decimals)
    and a local "PYUSD" mint (Token-2022, 6 decimals) at fixed addresses."""

    def __init__(self, *, clock: Callable[[], datetime] | None = None) -> None:
        self.svm = LiteSVM()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._records: dict[str, _Record] = {}
        self._lock = threading.RLock()  # LiteSVM is not thread-safe; callers may use threads
        self.slot_clocked = False  # True while a slot clock (devnode.SlotClock) advances slots
        self.faucet = Keypair.from_seed(FAUCET_SEED)
        self.airdrop(self.faucet.pubkey(), 100_000 * LAMPORTS_PER_SOL)
        self.mints: dict[str, tuple[Pubkey, Pubkey]] = {}  # symbol → (mint, token program)
        self._create_mint("USDC", Keypair.from_seed(LOCAL_USDC_SEED), TOKEN_PROGRAM, 6)
        self._create_mint("PYUSD", Keypair.from_seed(LOCAL_PYUSD_SEED), TOKEN_2022_PROGRAM, 6)

    # -- faucet helpers ---------------------------------------------------------------

    def airdrop(self, wallet: str | Pubkey, lamports: int) -> None:
        with self._lock:
            result = self.svm.airdrop(_pk(wallet), lamports)
            if isinstance(result, FailedTransactionMetadata):
                raise RuntimeError(f"airdrop failed: {result.err()}")

    def mint_tokens(self, wallet: str | Pubkey, symbol: str, amount: int) -> Pubkey:
        """Mint `amount` smallest units of a local token to the wallet's ATA (created if
        missing). Returns the ATA."""
        mint, program = self.mints[symbol.upper()]
        owner = _pk(wallet)
        ata = get_associated_token_address(owner, mint, program)
        ixs = [
            create_idempotent_associated_token_account(self.faucet.pubkey(), owner, mint, program),
            mint_to(MintToParams(program_id=program, mint=mint, dest=ata, mint_authority=self.faucet.pubkey(),
                                 amount=amount, signers=[])),
        ]
        result = self.send(Transaction.new_signed_with_payer(
            ixs, self.faucet.pubkey(), [self.faucet], self.latest_blockhash()))
        if not result.ok:
            raise RuntimeError(f"mint failed: {result.error}")
        return ata

    def new_wallet(self, *, sol: int = 0, tokens: dict[str, int] | None = None) -> Keypair:
        """A fresh funded keypair (SOL in lamports, tokens in smallest units by symbol)."""
        kp = Keypair()
        if sol:
            self.airdrop(kp.pubkey(), sol)
        for symbol, amount in (tokens or {}).items():
            self.mint_tokens(kp.pubkey(), symbol, amount)
        return kp

    def install_mint(self, symbol: str, address: str, program: str, decimals: int) -> Pubkey:
        """Place a mint at a fixed address (e.g. mainnet USDC's) with the faucet as its
        authority, by writing the account directly: for fixtures and rehearsals that
        need real addresses. Returns the mint."""
        mint = Pubkey.from_string(address)
        faucet = bytes(self.faucet.pubkey())
        data = (struct.pack("<I", 1) + faucet + struct.pack("<QBB", 0, decimals, 1)
                + struct.pack("<I", 0) + bytes(32))
        with self._lock:
            rent = self.svm.minimum_balance_for_rent_exemption(MINT_SIZE)
            self.svm.set_account(mint, Account(rent, data, Pubkey.from_string(program), False, 0))
        self.mints[symbol.upper()] = (mint, Pubkey.from_string(program))
        return mint

    # -- reads ------------------------------------------------------------------------

    def balance(self, wallet: str | Pubkey) -> int:
        with self._lock:
            return int(self.svm.get_balance(_pk(wallet)) or 0)

    def token_balance(self, token_account: str | Pubkey) -> int | None:
        """Balance of a token account, or None when it does not exist."""
        with self._lock:
            parsed = self._token_account(_pk(token_account))
        return None if parsed is None else parsed[2]

    def account_exists(self, address: str | Pubkey) -> bool:
        with self._lock:
            acct = self.svm.get_account(_pk(address))
        return acct is not None and acct.lamports > 0

    def latest_blockhash(self) -> Hash:
        with self._lock:
            return self.svm.latest_blockhash()

    def lookup(self, signature: str) -> tuple[dict[str, Any] | None, str | None]:
        """(jsonParsed transaction document, commitment reached) or (None, None)."""
        record = self._records.get(signature)
        if record is None:
            return None, None
        return record.doc, record.commitment

    def set_commitment(self, signature: str, commitment: str) -> None:
        self._records[signature].commitment = commitment

    # -- writes -----------------------------------------------------------------------

    def slot(self) -> int:
        with self._lock:
            return int(self.svm.get_clock().slot)

    def advance_slot(self) -> int:
        """Move to the next slot at the clock's time (a slot clock calls this); the new slot."""
        with self._lock:
            old = self.svm.get_clock()
            slot = old.slot + 1
            self.svm.set_clock(Clock(slot, old.epoch_start_timestamp, old.epoch,
                                     old.leader_schedule_epoch, int(self._clock().timestamp())))
            return int(slot)

    def send(
        self, tx: Transaction, *, commitment: str = "finalized", new_slot: bool | None = None
    ) -> SendResult:
        """Execute a signed transaction in a new slot (or the current one: the default
        when a slot clock drives the chain, see `slot_clocked`) at the clock's time;
        record it (successful or failed, as a node would), return its signature and status."""
        with self._lock:
            now = int(self._clock().timestamp())
            old = self.svm.get_clock()
            if new_slot is None:
                new_slot = not self.slot_clocked
            slot = old.slot + 1 if new_slot else old.slot
            self.svm.set_clock(Clock(slot, old.epoch_start_timestamp, old.epoch,
                                     old.leader_schedule_epoch, now))
            keys = [str(k) for k in tx.message.account_keys]
            pre_lamports = [self.balance(k) for k in keys]
            pre_tokens = self._token_balances(keys)
            result = self.svm.send_transaction(tx)
            x87.clear()  # LiteSVM leaves this thread's x87 unit dirty, which SQLite reads (x87.py)
            # A fresh blockhash per transaction: two identical payments stay two transactions.
            self.svm.expire_blockhash()
            meta: TransactionMetadata
            if isinstance(result, FailedTransactionMetadata):
                meta, err = result.meta(), str(result.err())
                if "AlreadyProcessed" in err or "SignatureFailure" in err or "BlockhashNotFound" in err:
                    # Rejected before execution: a node would not record it either.
                    return SendResult(str(tx.signatures[0]), False, err, list(meta.logs()))
            else:
                meta, err = result, None
            signature = str(tx.signatures[0])
            doc = _document(tx, meta, err, slot, now, pre_lamports, [self.balance(k) for k in keys],
                            pre_tokens, self._token_balances(keys))
            self._records[signature] = _Record(doc, commitment)
            return SendResult(signature, err is None, err, list(meta.logs()))

    # -- internals --------------------------------------------------------------------

    def _create_mint(self, symbol: str, mint: Keypair, program: str, decimals: int) -> None:
        prog = Pubkey.from_string(program)
        with self._lock:
            rent = self.svm.minimum_balance_for_rent_exemption(MINT_SIZE)
        ixs = [
            create_account(CreateAccountParams(from_pubkey=self.faucet.pubkey(), to_pubkey=mint.pubkey(),
                                               lamports=rent, space=MINT_SIZE, owner=prog)),
            initialize_mint2(InitializeMint2Params(
                decimals=decimals, program_id=prog, mint=mint.pubkey(),
                mint_authority=self.faucet.pubkey(), freeze_authority=None)),
        ]
        tx = Transaction.new_signed_with_payer(ixs, self.faucet.pubkey(), [self.faucet, mint],
                                               self.latest_blockhash())
        result = self.send(tx)
        if not result.ok:
            raise RuntimeError(f"creating the local {symbol} mint failed: {result.error}")
        self.mints[symbol] = (mint.pubkey(), prog)

    def _token_account(self, address: Pubkey) -> tuple[str, str, int, str] | None:
        """(mint, owner, amount, program) of an initialised token account, else None."""
        acct = self.svm.get_account(address)
        if acct is None or str(acct.owner) not in TOKEN_PROGRAMS:
            return None
        data = bytes(acct.data)
        # SPL layout: mint 0..32, owner 32..64, amount 64..72, state at 108. Token-2022
        # accounts with extensions are longer and carry account type 2 at offset 165.
        if len(data) < 165 or (len(data) > 165 and data[165] != 2) or data[108] == 0:
            return None
        return (str(Pubkey.from_bytes(data[0:32])), str(Pubkey.from_bytes(data[32:64])),
                struct.unpack_from("<Q", data, 64)[0], str(acct.owner))

    def _decimals(self, mint: str) -> int:
        acct = self.svm.get_account(Pubkey.from_string(mint))
        return bytes(acct.data)[44] if acct is not None and len(acct.data) > 44 else 0

    def _token_balances(self, keys: Sequence[str]) -> list[dict[str, Any]]:
        out = []
        for i, key in enumerate(keys):
            parsed = self._token_account(Pubkey.from_string(key))
            if parsed is None:
                continue
            mint, owner, amount, program = parsed
            decimals = self._decimals(mint)
            out.append({"accountIndex": i, "mint": mint, "owner": owner, "programId": program,
                        "uiTokenAmount": _ui_amount(amount, decimals)})
        return out


def _pk(value: str | Pubkey) -> Pubkey:
    return value if isinstance(value, Pubkey) else Pubkey.from_string(value)


def _ui_amount(amount: int, decimals: int) -> dict[str, Any]:
    text = str(amount).rjust(decimals + 1, "0")
    ui = f"{text[:-decimals]}.{text[-decimals:]}".rstrip("0").rstrip(".") if decimals else text
    return {"amount": str(amount), "decimals": decimals, "uiAmount": float(ui), "uiAmountString": ui}


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def b58encode(data: bytes) -> str:
    n = int.from_bytes(data, "big")
    out = ""
    while n:
        n, r = divmod(n, 58)
        out = _B58[r] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def parse_instruction(
    program: str, accounts: list[str], data: bytes, stack_height: int | None
) -> dict[str, Any]:
    """One instruction in jsonParsed form (the subset of parsers a payment needs)."""
    parsed: dict[str, Any] | None = None
    name = ""
    try:
        if program == SYSTEM_PROGRAM:
            name = "system"
            kind = struct.unpack_from("<I", data, 0)[0]
            if kind == 2:
                parsed = {"type": "transfer", "info": {"source": accounts[0], "destination": accounts[1],
                                                        "lamports": struct.unpack_from("<Q", data, 4)[0]}}
            elif kind == 0:
                lamports, space = struct.unpack_from("<QQ", data, 4)
                parsed = {"type": "createAccount", "info": {
                    "source": accounts[0], "newAccount": accounts[1], "lamports": lamports, "space": space,
                    "owner": str(Pubkey.from_bytes(data[20:52]))}}
        elif program in TOKEN_PROGRAMS:
            name = "spl-token"
            if data[0] == 3:
                info: dict[str, Any] = {"source": accounts[0], "destination": accounts[1],
                                        "amount": str(struct.unpack_from("<Q", data, 1)[0])}
                info.update(_authority(accounts[2:]))
                parsed = {"type": "transfer", "info": info}
            elif data[0] == 12:
                amount = struct.unpack_from("<Q", data, 1)[0]
                info = {"source": accounts[0], "mint": accounts[1], "destination": accounts[2],
                        "tokenAmount": _ui_amount(amount, data[9])}
                info.update(_authority(accounts[3:]))
                parsed = {"type": "transferChecked", "info": info}
            elif data[0] == 7:
                parsed = {"type": "mintTo", "info": {"mint": accounts[0], "account": accounts[1],
                                                     "mintAuthority": accounts[2],
                                                     "amount": str(struct.unpack_from("<Q", data, 1)[0])}}
        elif program == ATA_PROGRAM:
            name = "spl-associated-token-account"
            parsed = {"type": "createIdempotent" if data[:1] == b"\x01" else "create", "info": {
                "source": accounts[0], "account": accounts[1], "wallet": accounts[2], "mint": accounts[3],
                "systemProgram": accounts[4], "tokenProgram": accounts[5]}}
    except (IndexError, struct.error):
        parsed = None
    if parsed is None:
        return {"accounts": accounts, "data": b58encode(data), "programId": program,
                "stackHeight": stack_height}
    return {"parsed": parsed, "program": name, "programId": program, "stackHeight": stack_height}


_IX_CUSTOM = re.compile(r"InstructionError\(\((\d+), Tagged\(InstructionErrorCustom\((\d+)\)\)\)\)")
_IX_FIELDLESS = re.compile(r"InstructionError\(\((\d+), Fieldless\(InstructionErrorFieldless\.(\w+)\)\)\)")
_FIELDLESS = re.compile(r"^TransactionErrorFieldless\.(\w+)$")


def rpc_error(err: str) -> Any:
    """A LiteSVM error's text in the JSON shape a node reports in meta.err."""
    if m := _IX_CUSTOM.search(err):
        return {"InstructionError": [int(m.group(1)), {"Custom": int(m.group(2))}]}
    if m := _IX_FIELDLESS.search(err):
        return {"InstructionError": [int(m.group(1)), m.group(2)]}
    if m := _FIELDLESS.match(err):
        return m.group(1)
    return {"Other": err}


def _authority(signers: list[str]) -> dict[str, Any]:
    if len(signers) > 1:
        return {"multisigAuthority": signers[0], "signers": signers[1:]}
    return {"authority": signers[0]}


def _document(tx: Transaction, meta: TransactionMetadata, err: str | None, slot: int, block_time: int,
              pre_lamports: list[int], post_lamports: list[int], pre_tokens: list[dict[str, Any]],
              post_tokens: list[dict[str, Any]]) -> dict[str, Any]:
    msg = tx.message
    keys = [str(k) for k in msg.account_keys]
    header = msg.header
    n_signed = header.num_required_signatures
    writable = [
        (i < n_signed - header.num_readonly_signed_accounts) if i < n_signed
        else (i < len(keys) - header.num_readonly_unsigned_accounts)
        for i in range(len(keys))
    ]
    def compiled(ix: Any, height: int | None) -> dict[str, Any]:
        return parse_instruction(keys[ix.program_id_index], [keys[a] for a in bytes(ix.accounts)],
                                 bytes(ix.data), height)

    inner = [
        {"index": i, "instructions": [compiled(x.instruction(), x.stack_height()) for x in group]}
        for i, group in enumerate(meta.inner_instructions()) if group
    ]
    return {
        "blockTime": block_time,
        "slot": slot,
        "version": "legacy",
        "meta": {
            "err": None if err is None else rpc_error(err),
            "status": {"Ok": None} if err is None else {"Err": rpc_error(err)},
            "fee": meta.fee(),
            "computeUnitsConsumed": meta.compute_units_consumed(),
            "innerInstructions": inner,
            "logMessages": list(meta.logs()),
            "preBalances": pre_lamports,
            "postBalances": post_lamports,
            "preTokenBalances": pre_tokens,
            "postTokenBalances": post_tokens,
            "rewards": [],
        },
        "transaction": {
            "signatures": [str(s) for s in tx.signatures],
            "message": {
                "accountKeys": [{"pubkey": k, "signer": i < n_signed, "writable": writable[i],
                                 "source": "transaction"} for i, k in enumerate(keys)],
                "instructions": [compiled(ix, None) for ix in msg.instructions],
                "recentBlockhash": str(msg.recent_blockhash),
            },
        },
    }
