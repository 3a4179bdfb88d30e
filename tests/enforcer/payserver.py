"""An enforcer process with the spend enforcer, for the crash tests (run as a script):

    python payserver.py STORE SOCKET SMTP_PORT RPC_URL

STORE is a SQLite path or a postgresql:// DSN (enforcer.store.open_store).

It recovers every in-flight intent, then serves on the Unix socket and prints "ready".
ENVELOPAY_ENFORCER_CRASH_AT (payments.CRASH_ENV) names the point where it SIGKILLs itself.
"""

from __future__ import annotations

# At the top level, so that a fork server that has run this module's top level
# (tests/_zygote.py, the crash test) forks children with the imports done; httpcore
# too, which httpx imports only when the rail makes its first client.
import asyncio
import sys

import httpcore  # noqa: F401

from envelopay.enforcer.send.backends import open_store
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.payments_exec import recover
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.rail import make_rail


async def main(db: str, sock: str, smtp_port: int, rpc_url: str) -> None:
    store = open_store(db)
    await store.open()
    enforcer = Enforcer(
        store,
        SmtpTransport(SmtpConfig("127.0.0.1", smtp_port, security="none", max_attempts=1)),
        operator_token_hash=hash_token("op"),
    )
    pstore = PaymentStore(store)
    await pstore.open()
    rail = make_rail(
        {
            "backend": "rpc",
            "rpc_url": rpc_url,
            "network": "local",
            "confirm_timeout": 10,
            "poll_interval": 0.01,
        }
    )
    payments = Payments(
        enforcer, pstore, Vault(b"test-vault-secret-0123456789abcdef"), {"solana-local": SolanaPayer(rail)}
    )
    await recover(payments)
    _runner, _ = await start_server(enforcer, path=sock, payments=payments)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
