"""`envelopay approvals …`: the operator's approval queue — list, show, and the
decisions approve, reject and retry. Each talks to the running enforcer with the operator
credential (cli/operator.ask). `approvals approve|retry` exit by what became of the send
(cli/operator.decision_exit); other exit codes by cli/output.EXIT_CODES.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from envelopay.cli.approval_lines import approval_lines
from envelopay.cli.operator import ask, decision_exit, listing
from envelopay.cli.options import OPERATOR, AfterOpt, LimitOpt, OperatorOptions
from envelopay.cli.output import FAILED, fail, finish, ran

approvals_app = typer.Typer(help="The approval queue (operator).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `approvals` and its subcommands to the top-level app."""
    app.add_typer(approvals_app, name="approvals")


def _approval_line(r: dict[str, Any]) -> str:
    what = r["subject"] or (r["type"] or "").upper()
    return f"{r['id']}  {r['state']:<8} {r['agent']} → {r['to']}: {what}  ({r['reason']})"


_DECISIONS = {
    "approve": "Approve a pending send and deliver it.",
    "reject": "Reject a pending send.",
    "retry": "Re-execute an approved send stranded by a crash (after the grace period).",
}





HashOpt = Annotated[str | None, typer.Option(
    "--hash", metavar="SHA256",
    help="The content_hash `approvals show` printed: refused (exit 1, conflict) if the approval "
    "changed since.",
)]


def _decision_lines(send_id: str, data: dict[str, Any]) -> list[str]:
    """The outcome, then (apart) why it had been held: `SENT (recipient not on the
    allowlist)` read as if that were why it was sent. A sent approval's detail is the
    reason it was held; any other state's is its own (why it failed)."""
    state, detail = data["state"], data.get("detail") or ""
    if state != "SENT":
        return [f"{send_id}: {state}" + (f": {detail}" if detail else "")]
    return [f"{send_id}: SENT (approved; it left)", *([f"  it had been held: {detail}"] if detail else [])]


def _decision(action: str, doc: str) -> Callable[..., None]:
    def decide(where: OperatorOptions, send_id: Annotated[str, typer.Argument()], content_hash: HashOpt = None
               ) -> None:
        status, data = ask(where, lambda op: op.decide(send_id, action, content_hash))
        detail = f" ({data['detail']})" if data.get("detail") else ""
        if status == 404:
            fail(f"SEND_ID: no approval {send_id}")
        if status == 409:
            fail(f"conflict: the approval is {data['state']}{detail}", code=FAILED, error="conflict")
        code = decision_exit(action, data)
        disposition = data.get("disposition") or {}
        finish(where.as_json, ran(f"approvals {action}", code, id=send_id, state=data["state"],
                                     detail=data.get("detail", ""), delivered=data["state"] == "SENT",
                                     disposition=disposition or None),
               _decision_lines(send_id, data))

    decide.__doc__ = doc
    decide.__name__ = action
    return decide


@approvals_app.command("list")
@OPERATOR
def approvals_list(where: OperatorOptions, limit: LimitOpt = 100, after: AfterOpt = None) -> None:
    """The approval queue, pending first, one page."""
    rows, nxt = ask(where, lambda op: op.approvals_page(limit, after))
    listing(where, "approvals list", "approvals", rows, nxt, "approval queue is empty", _approval_line)

@approvals_app.command("show")
@OPERATOR
def approvals_show(
    where: OperatorOptions, approval_id: Annotated[str, typer.Argument(metavar="ID")]
) -> None:
    """One approval, exactly as it would leave: a mail's from, to, subject, body,
    attachments and thread; a payment's amount, payee, wallet, invoice, the agent's
    balance (and shortfall) and spend policy with today's remaining caps; and the
    content hash that `approvals approve ID --hash` binds the decision to."""
    view = ask(where, lambda op: op.approval(approval_id))
    if view is None:
        fail(f"ID: no approval {approval_id}")
    finish(where.as_json, ran("approvals show", approval=view), approval_lines(view))

for _action, _doc in _DECISIONS.items():
    approvals_app.command(_action)(OPERATOR(_decision(_action, _doc)))
