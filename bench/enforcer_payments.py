"""Spend enforcer figures for bench/enforcer.py (issue 14), on one store per call.

- floor: the Solana rail's bare `pay()` (sign + send on the in-process LiteSVM chain) from
  a wallet the rail holds, one payment at a time, in the same run;
- the floor with the PAY's SMTP delivery: the bare pay, then the PAY composed and
  delivered once (what pay-then-send must do anyway);
- allowed payments: the whole pay-then-send — one read (agent by token, spend policy,
  idempotency key, wallet and sealed key), send checks, spend checks, one transaction for
  the four cap increments and the intent, unsealing the key, sign, the recorded tx id with
  the broadcast claim, broadcast on the same chain, the PAY composed and delivered over
  SMTP (aiosmtpd in a separate process), one transaction for the send record and SENT —
  one at a time (payments from one wallet are serialized between blockhash and broadcast
  anyway). Figures: ms added per payment over the floor (target <= 2 ms) and over the
  floor with SMTP (the leash itself); the store statements and commits one payment runs;
- refusals at each check, 16 at a time: unknown asset (S1, blocked), payee not allowed
  (S2, held: an intent row), over the per-payment maximum (S3, held), daily cap reached
  (S4: the hourly increment, the refused daily one, the hand-back, held), require_invoice
  (blocked). Target >= 1,000/s on SQLite.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from solders.keypair import Keypair

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.local import LocalSolana
from envelopay_solana.rail import SolanaRail, make_rail

CHAIN = "solana-local"


async def _sequential_ms(n: int, op: Callable[[int], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) * 1000 / n


async def _sequential(n: int, op: Callable[[int], Awaitable[Any]]) -> tuple[float, float]:
    """(wall ms, this process's CPU ms) per call."""
    cpu = time.process_time()
    wall = await _sequential_ms(n, op)
    return wall, (time.process_time() - cpu) * 1000 / n


async def bench_payments(
    name: str,
    store: EnforcerStore,
    port: int,
    n: int,
    rounds: int,
    best: Callable[[int, int, int, Callable[[int], Awaitable[Any]]], Awaitable[float]],
) -> tuple[list[str], float, float]:
    """(lines, the lowest refusal rate, ms added per allowed payment)."""
    chain = LocalSolana()
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", port, security="none", max_attempts=1))
    enf = Enforcer(store, deliverer)
    pstore = PaymentStore(store)
    await pstore.open()
    payer = SolanaPayer(make_rail({"local_chain": chain}))
    payments = Payments(
        enf, pstore, Vault(b"bench-vault-secret-0123456789"), {CHAIN: payer}, crash_hook=lambda _p: None
    )
    key = f"{CHAIN}/USDC"
    big = SpendLimit(per_payment=10**6, hourly=10**15, daily=10**15)
    tokens: dict[str, str] = {}
    for agent, limit, extra in (
        ("payer", big, {}),
        ("strict", SpendLimit(per_payment=10, daily=10**15), {}),
        ("daily", SpendLimit(hourly=10**15, daily=1), {}),
        ("invoices", big, {"require_invoice": True}),
    ):
        _, tokens[agent] = await enf.create_agent(
            agent, f"{agent}@agents.test", allow=("partner.test", "elsewhere.test"), hourly=10**9, daily=10**9
        )
        wallet = await payments.create_wallet(agent, CHAIN)
        chain.airdrop(wallet.address, 10**12)
        chain.mint_tokens(wallet.address, "USDC", 10**13)
        await payments.set_policy(agent, SpendPolicy(limits={key: limit}, payees=("partner.test",), **extra))
    await payments.submit("pay", tokens["daily"], _req(1, "first"))  # the day's 1 unit is spent

    # The floor: the rail's bare pay from a wallet it holds, to one recipient (as below).
    holder = chain.new_wallet(sol=10**12, tokens={"USDC": 10**13})
    bare: SolanaRail = make_rail({"local_chain": chain, "keypair": bytes(holder)})
    dest = str(Keypair().pubkey())
    await bare.pay(chain=CHAIN, token="USDC", amount=1, recipient=dest)  # the recipient's account exists

    async def floor(i: int) -> None:
        await bare.pay(chain=CHAIN, token="USDC", amount=1, recipient=dest)

    from datetime import UTC, datetime

    from envelopay.protocol.compose import compose
    from envelopay.protocol.messages import Pay
    from envelopay.protocol.outbound import Outbound

    async def floor_and_mail(i: int) -> None:
        # The two things pay-then-send must do anyway: the bare pay and one SMTP delivery
        # of the PAY carrying its proof (composed here, as the enforcer composes it).
        proof = await bare.pay(chain=CHAIN, token="USDC", amount=1, recipient=dest)
        raw = compose(
            Outbound(
                sender="payer@agents.test",
                recipient="seller@partner.test",
                message=Pay(id=f"f{i}", amount=1, token="USDC", chain=CHAIN, proof=proof),
                message_id=f"<f{i}@agents.test>",
                date=datetime.now(UTC),
            )
        )
        await deliverer.send(raw, "payer@agents.test", "seller@partner.test")

    seq = [0]

    async def allowed(i: int) -> None:
        seq[0] += 1
        d = await payments.submit("pay", tokens["payer"], _req(1, f"a{seq[0]}", dest))
        assert d.status == "paid_and_sent", d

    def refused(agent: str, expect: str, **changes: Any) -> Callable[[int], Awaitable[None]]:
        async def op(i: int) -> None:
            seq[0] += 1
            d = await payments.submit("pay", tokens[agent], {**_req(100, f"r{seq[0]}", dest), **changes})
            assert d.code == expect, d

        return op

    await allowed(0)
    statements, commits = await _count_store_work(store, lambda: allowed(0))
    # The three interleaved round by round (a shared machine's load comes in bursts: each
    # figure's best round then comes from the same stretch of time as the others').
    runs: dict[str, list[tuple[float, float]]] = {"floor": [], "both": [], "allowed": []}
    for _ in range(rounds):
        for key, fn in (("floor", floor), ("both", floor_and_mail), ("allowed", allowed)):
            runs[key].append(await _sequential(n, fn))
    floor_ms, both_ms, allowed_ms = (min(w for w, _ in runs[k]) for k in ("floor", "both", "allowed"))
    floor_cpu, both_cpu, allowed_cpu = (min(c for _, c in runs[k]) for k in ("floor", "both", "allowed"))
    added = allowed_ms - floor_ms
    kinds = [
        ("S1 unknown asset (blocked)", refused("payer", "unknown_asset", token="DOGE")),
        ("S2 payee not allowed (held)", refused("payer", "payee_not_allowed", to="x@elsewhere.test")),
        ("S3 over per-payment max (held)", refused("strict", "over_payment_max")),
        ("S4 daily cap reached (held)", refused("daily", "daily_cap_reached")),
        ("B  require_invoice (blocked)", refused("invoices", "invoice_required")),
    ]
    lines = [
        f"{name}: payments floor (rail's bare pay, LiteSVM)  {floor_ms:6.2f} ms/payment"
        f"  {1000 / floor_ms:7,.0f}/s",
        f"{name}: allowed pay-then-send (+SMTP)           {allowed_ms:6.2f} ms/payment"
        f"  {1000 / allowed_ms:7,.0f}/s  added {added:.2f} ms over the bare pay"
        f" ({allowed_ms - both_ms:.2f} ms over pay + SMTP)  ratio {allowed_ms / floor_ms:.2f}",
        f"{name}: bare pay + bare SMTP of the PAY         {both_ms:6.2f} ms/payment"
        f"  {1000 / both_ms:7,.0f}/s",
        f"{name}: CPU of this process per payment         floor {floor_cpu:.2f} ms, + SMTP {both_cpu:.2f} ms,"
        f" allowed {allowed_cpu:.2f} ms (added {allowed_cpu - floor_cpu:.2f} ms; the sink's is not counted)",
        f"{name}: store work per allowed payment          {statements} statements, {commits} commits"
        " (+ the wallet lock)",
    ]
    rates = []
    for label, op in kinds:
        value = await best(rounds, n * 4, 16, op)
        rates.append(value)
        lines.append(f"{name}: refusal {label:<32} {value:>8,.0f} decisions/s")
    await deliverer.close()
    return lines, min(rates), added


async def _count_store_work(store: EnforcerStore, op: Callable[[], Awaitable[Any]]) -> tuple[int, int]:
    """(statements, store calls: each an autocommit statement or one transaction) of `op`."""
    counts = [0, 0]
    execute_sql, fetch, transaction = store.execute_sql, store.fetch, store.transaction

    def counting(run: Any) -> Any:  # raw statements (tuples) and the typed ones (rows by name)
        async def counted(sql: str, params: Any) -> Any:
            counts[0] += 1
            counts[1] += not sql.lstrip().upper().startswith("SELECT")
            return await run(sql, params)

        return counted

    async def counting_tx(steps: Any, **kw: Any) -> Any:
        counts[0] += len(steps)
        counts[1] += 1
        return await transaction(steps, **kw)

    store.execute_sql, store.fetch = counting(execute_sql), counting(fetch)  # type: ignore[method-assign]
    store.transaction = counting_tx  # type: ignore[method-assign]
    try:
        await op()
    finally:
        del store.execute_sql, store.fetch, store.transaction
    return counts[0], counts[1]


def _req(amount: int, key: str, wallet: str | None = None) -> dict[str, Any]:
    return {
        "to": "seller@partner.test",
        "chain": CHAIN,
        "token": "USDC",
        "amount": str(amount),
        "wallet": wallet or str(Keypair().pubkey()),
        "idempotency_key": key,
    }
