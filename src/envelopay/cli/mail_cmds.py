"""CLI commands of the agent mailbox: `envelopay mail …` and its contact book (the
garden's commands are in cli/garden_cmds.py).

Exit codes by cli/output.EXIT_CODES."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.options import (
    MAILBOX,
    MAILBOX_AS,
    MailboxOptions,
    OlderThanOpt,
)
from envelopay.cli.output import (
    FAILED,
    answers,
    delivery_exit,
    emit,
    emit_or_say,
    fail,
    finish,
    ran,
    table,
)

if TYPE_CHECKING:
    from envelopay.mail.mailbox import Mailbox, MailRecord
    from envelopay.mail.mailbox.contacts import Contact, ContactBook


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    _register_mail(app)


mail = typer.Typer(
    help="The agent mailbox: check, search, read, archive, delete, reply, contacts, threads.",
    no_args_is_help=True,
)
contacts = typer.Typer(help="The private contact book.", no_args_is_help=True)


def _register_mail(app: typer.Typer) -> None:
    """`envelopay mail ...`: the agent mailbox commands (owned by the mailbox work)."""
    app.add_typer(mail, name="mail")


@contextmanager
def _opened(where: MailboxOptions) -> Iterator[Mailbox]:
    """The chosen mailbox; a refusal answers with its code and field (EXIT_CODES)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.node.agent_mailbox import open_agent_mailbox

    with answers(as_json=where.as_json), \
            open_agent_mailbox(where.directory, where.config, where.address) as box:
        yield box


def _show(
    records: list[MailRecord],
    as_json: bool,
    *,
    with_body: bool = False,
    title: str = "",
    handled: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """`handled`: the worker's outcome per Message-ID (`check` with a worker config)."""
    if as_json:
        emit([_document(r, with_body, handled) for r in records], ensure_ascii=False)
    elif with_body:
        _show_bodies(records)
    else:
        _show_table(records, title, handled or {})


def _document(
    r: MailRecord, with_body: bool, handled: Mapping[str, Mapping[str, Any]] | None
) -> dict[str, Any]:
    doc = r.as_dict(with_body=with_body)
    if handled is not None:
        outcome = handled.get(r.message_id or "")
        doc["handled"] = None if outcome is None else {
            k: outcome.get(k) for k in ("status", "detail", "oops", "unanswered")
        }
    return doc


def _show_bodies(records: list[MailRecord]) -> None:
    from rich.console import Console  # lazy: keeps rich off this module's import

    console = Console(soft_wrap=False, width=max(100, Console().width))

    def say(text: str, highlight: bool = False) -> None:
        console.print(text, markup=False, highlight=highlight)

    for r in records:
        console.rule(f"{r.id} · {r.folder}")
        say(f"From: {r.from_addr}\nTo: {', '.join(r.to_addrs)}")
        if r.cc_addrs:
            say(f"Cc: {', '.join(r.cc_addrs)}")
        say(f"Subject: {r.subject}\nDate: {r.header_date or r.date.isoformat()}")  # as the mail says it
        if r.status != "ok":
            say(f"Status: {r.status} ({'; '.join(r.problems)})", highlight=True)
        for a in r.attachments:
            say(f"Attachment: {a.filename} ({a.size} bytes) {a.path or ''}", highlight=True)
        console.print("")
        say(r.body)


def _written(r: MailRecord) -> str:
    """When the mail says it was written (its Date header, in UTC), else when this mailbox
    took it in (the index's date, which a mailbox indexed late gives every mail at once),
    marked so, not passed off as the mail's own."""
    when = r.written
    return when.strftime("%Y-%m-%d %H:%M") if when is not None else r.date.strftime("%Y-%m-%d %H:%M indexed")


def _show_table(records: list[MailRecord], title: str, handled: Mapping[str, Mapping[str, Any]]) -> None:
    from rich.console import Console  # lazy: keeps rich off this module's import

    def row(r: MailRecord) -> tuple[str, ...]:
        mark = "" if r.read or r.folder != "inbox" else "● "
        flags = (" 📎" if r.attachments else "") + (" ⚠" if r.status != "ok" else "")
        outcome = handled.get(r.message_id or "")
        # The worker ignored it: say why first, so prose is not taken for served mail.
        ignored = outcome is not None and outcome.get("status") == "ignored"
        said = f"({outcome.get('detail')}) " if outcome is not None and ignored else ""  # [..] is rich markup
        return (r.id, _written(r), r.from_addr, f"{mark}{r.subject}{flags}",
                said + r.preview.replace("\n", " "))

    table(("id", "date", "from", "subject", "preview"), [row(r) for r in records], title=title or None,
          overflow=True, width=max(100, Console().width), empty="(no messages)")


_Truncate = Annotated[int, typer.Option(help="Preview characters; 0 = the full body.")]


@mail.command("check")
@MAILBOX_AS
def check(
    where: MailboxOptions,
    folder: Annotated[str, typer.Option(help="inbox, sent, archive or outbox.")] = "inbox",
    from_: Annotated[str | None, typer.Option("--from", help="Sender contains (case-insensitive).")] = None,
    subject: Annotated[str | None, typer.Option(help="Subject contains.")] = None,
    contains: Annotated[str | None, typer.Option(help="Subject or body contains.")] = None,
    after: Annotated[str | None, typer.Option(help="Stored after this ISO 8601 time.")] = None,
    before: Annotated[str | None, typer.Option(help="Stored before this ISO 8601 time.")] = None,
    unread_only: Annotated[bool, typer.Option("--unread-only", help="Only unread inbox mail.")] = False,
    has_attachments: Annotated[
        bool | None, typer.Option("--has-attachments/--no-attachments", help="With / without attachments.")
    ] = None,
    sort: Annotated[str, typer.Option(help="newest or oldest.")] = "newest",
    n: Annotated[int, typer.Option("-n", help="How many messages.")] = 10,
    truncate: _Truncate = 500,
) -> None:
    """List a folder, newest first, with filters."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.cli.mail_options import check_filter
    from envelopay.node.agent_mailbox import worker_outcomes

    with _opened(where) as box:
        flt = check_filter(from_=from_, subject=subject, contains=contains, after=after, before=before,
                           unread_only=unread_only, has_attachments=has_attachments, sort=sort, n=n,
                           truncate=truncate)
        records = box.check(folder, flt)
    # The worker's outcome beside each mail (issue 30 item 4): not protocol, and why.
    with answers(as_json=where.as_json):
        mids = (r.message_id for r in records)
        handled = worker_outcomes(where.directory, where.config, where.address, mids)
    _show(records, where.as_json, title=folder, handled=handled)


@mail.command("search")
@MAILBOX_AS
def search(
    where: MailboxOptions,
    query: Annotated[str, typer.Argument(help="A regular expression (sender, subject, body).")],
    folder: Annotated[str | None, typer.Option(help="One folder (default: inbox and sent).")] = None,
    truncate: _Truncate = 500,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="At most this many results.")] = 50,
    rank: Annotated[bool, typer.Option(
        "--rank", help="Best matches first (BM25), within blocks of the newest candidates.")] = False,
) -> None:
    """Regex search over sender, subject and body (the pattern's first word starts a word)."""
    with _opened(where) as box:
        found = box.search(query, folder, truncate=truncate, limit=limit, rank=rank)
        _show(found, where.as_json, title=f"search {query}")


@mail.command("read")
@MAILBOX_AS
def read(
    where: MailboxOptions,
    ids: Annotated[list[str], typer.Argument(help="Mailbox ids (from check or search).")],
) -> None:
    """Show messages in full; inbox messages become read."""
    with _opened(where) as box:
        _show(box.read(ids), where.as_json, with_body=True)


def _id_action(
    name: str, ids_help: str, doc: str, act: Callable[[Mailbox, list[str]], tuple[Any, str]]
) -> None:
    """One `mail NAME IDS...` command: act on the ids, say what was done."""

    def command(where: MailboxOptions, ids: list[str]) -> None:
        with _opened(where) as box:
            document, text = act(box, ids)
            emit_or_say(where.as_json, document, text)

    command.__annotations__["ids"] = Annotated[list[str], typer.Argument(help=ids_help)]
    command.__doc__ = doc
    command.__name__ = name
    mail.command(name)(MAILBOX_AS(command))


def _dismissed(box: Mailbox, ids: list[str]) -> tuple[Any, str]:
    count = box.dismiss(ids)
    return {"dismissed": count}, f"{count} marked read"


def _archived(box: Mailbox, ids: list[str]) -> tuple[Any, str]:
    moved = box.archive(ids)
    return {"archived": [r.id for r in moved]}, f"{len(moved)} archived"


def _deleted(box: Mailbox, ids: list[str]) -> tuple[Any, str]:
    count = box.delete(ids)
    return {"deleted": count}, f"{count} deleted"


_id_action("dismiss", "Inbox ids to mark read.", "Mark inbox messages read without showing them.", _dismissed)
_id_action("archive", "Inbox ids to archive.", "Move inbox messages to the archive.", _archived)
_id_action("delete", "Inbox or archive ids to delete for good.",
           "Delete inbox/archive messages permanently (sent mail is refused).", _deleted)


@mail.command("thread")
@MAILBOX_AS
def thread(
    where: MailboxOptions,
    message: Annotated[str, typer.Argument(help="Any message id of the thread.")],
    truncate: _Truncate = 200,
) -> None:
    """The whole conversation (all folders) grouped by References, oldest first."""
    with _opened(where) as box:
        _show(box.thread(message, truncate=truncate), where.as_json, title="thread")


@mail.command("reply")
@MAILBOX_AS
def reply(
    where: MailboxOptions,
    message: Annotated[str, typer.Argument(help="The id of the message to answer.")],
    text: Annotated[str | None, typer.Option("--message", "-m", help="The reply text.")] = None,
    text_file: Annotated[
        Path | None, typer.Option("--message-file", help="Read the reply text from this file ('-': stdin).")
    ] = None,
    reply_all: Annotated[
        bool, typer.Option("--all", help="Reply to all (To and Cc, minus yourself).")
    ] = False,
    attach: Annotated[
        list[str] | None, typer.Option("--attach", help="A file inside the agent directory (repeatable).")
    ] = None,
    smtp: Annotated[
        str | None, typer.Option(help="SMTP submission host:port (default: $ENVELOPAY_SMTP).")
    ] = None,
    security: Annotated[str, typer.Option(help="none, starttls or tls.")] = "starttls",
) -> None:
    """Reply with threading headers (In-Reply-To, References, `Re:` subject)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.cli.mail_options import reply_text, smtp_config
    from envelopay.mail.mailbox import smtp_send_fn
    from envelopay.mail.mailbox.outgoing import signed_send_fn
    from envelopay.node.agent_mailbox import mailbox_signer

    with answers(as_json=where.as_json):
        body = reply_text(text, text_file)
        cfg = smtp_config(smtp, security)
        sign = mailbox_signer(where.directory, where.config, where.address)
    send = smtp_send_fn(cfg) if sign is None else signed_send_fn(smtp_send_fn(cfg), sign)
    with _opened(where) as box:
        result = asyncio.run(box.reply(send, message, body, reply_all=reply_all, attachments=attach or ()))
    payload = {"status": result.status, "id": result.id, "message_id": result.message_id,
               "detail": result.detail}
    line = f"{result.status}: {result.id or '-'} {result.message_id or ''} {result.detail}".rstrip()
    emit_or_say(where.as_json, payload, line)
    if result.status not in ("sent", "pending_approval"):
        # Refused for good (blocked, a 5xx) → 1; the transport or enforcer unreachable → 3.
        raise typer.Exit(FAILED if result.status == "blocked" else delivery_exit(result.detail or ""))


@mail.command("fetch")
@MAILBOX
def fetch(
    where: MailboxOptions,
    imap: Annotated[str, typer.Option(help="IMAP server host:port.")],
    user: Annotated[str, typer.Option(help="IMAP login name.")],
    mailbox_name: Annotated[str, typer.Option("--mailbox", help="The IMAP folder to read.")] = "INBOX",
    tls: Annotated[bool, typer.Option("--tls/--no-tls", help="Implicit TLS (IMAPS).")] = True,
    idle: Annotated[bool, typer.Option("--idle", help="Keep running: IDLE push with reconnect.")] = False,
) -> None:
    """Copy unprocessed IMAP mail into the inbox; each message is flagged
    $EnvelopayProcessed on the server only after it is stored. The password comes from
    $ENVELOPAY_IMAP_PASSWORD (never the command line)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.cli.mail_options import imap_config
    from envelopay.mail.mailbox.site import fetch_imap

    with answers(as_json=where.as_json):
        cfg = imap_config(imap, user, mailbox_name, tls)
    with _opened(where) as box:

        def started() -> None:
            typer.echo(f"fetching {user}@{cfg.host}:{cfg.port}/{mailbox_name} (IDLE); Ctrl-C stops", err=True)

        with answers(as_json=where.as_json):  # the IMAP server unreachable: the environment, 3
            stored = fetch_imap(box, cfg, idle=idle, started=started)
    emit_or_say(where.as_json, {"stored": stored}, f"{stored} message(s) stored")


@mail.command("compact")
@MAILBOX
def compact(where: MailboxOptions, older_than: OlderThanOpt = 30.0) -> None:
    """Retention: delete send-log rows older than the window (the loop guard's window stays)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.node.agent_mailbox import agent_mailbox_site

    with answers(as_json=where.as_json):
        site = agent_mailbox_site(where.directory, where.config, where.address)
    index = (site.root or Path(".")) / "mailbox" / "index.sqlite3"
    if not index.is_file():  # never made here: a maintenance command maintains what exists
        fail(f"--dir: no mailbox at {index.parent}; nothing was created (mail check makes it)",
             as_json=where.as_json)
    with _opened(where) as box:
        removed = box.compact_sends(timedelta(days=older_than))
    finish(where.as_json, ran("mail compact", removed=removed), [f"removed {removed} send-log rows"])


mail.add_typer(contacts, name="contacts")


@contacts.command("list")
@MAILBOX
def contacts_list(where: MailboxOptions) -> None:
    """List contacts."""
    with _opened(where) as box:
        items = box.contacts.list()
        if where.as_json:
            emit([_contact(c) for c in items])
        else:
            table(("address", "name", "note"), [(c.address, c.name, c.note) for c in items], title="contacts")


def _contact(c: Contact) -> dict[str, str]:
    return {"address": c.address, "name": c.name, "note": c.note}


_ContactArg = Annotated[str, typer.Argument(help="The contact's address.")]


@contacts.command("add")
@MAILBOX
def contacts_add(
    where: MailboxOptions,
    contact: _ContactArg,
    name: Annotated[str, typer.Option(help="Display name.")] = "",
    note: Annotated[str, typer.Option(help="A private note.")] = "",
) -> None:
    """Add a contact, or replace the one with this address."""
    _save_contact(where, "saved", lambda book: book.add(contact, name=name, note=note))


_NewName = Annotated[str | None, typer.Option(help="New display name.")]
_NewNote = Annotated[str | None, typer.Option(help="New note.")]


@contacts.command("edit")
@MAILBOX
def contacts_edit(
    where: MailboxOptions, contact: _ContactArg, name: _NewName = None, note: _NewNote = None
) -> None:
    """Change only the given fields of a contact."""
    _save_contact(where, "updated", lambda book: book.edit(contact, name=name, note=note))


def _save_contact(where: MailboxOptions, verb: str, save: Callable[[ContactBook], Contact]) -> None:
    with _opened(where) as box:
        c = save(box.contacts)
        emit_or_say(where.as_json, _contact(c), f"{verb} {c.address}")


@contacts.command("remove")
@MAILBOX
def contacts_remove(where: MailboxOptions, contact: _ContactArg) -> None:
    """Remove a contact."""
    with _opened(where) as box:
        removed = box.contacts.remove(contact)
    emit_or_say(where.as_json, {"removed": removed}, "removed" if removed else "no such contact")
    if not removed:
        raise typer.Exit(1)
