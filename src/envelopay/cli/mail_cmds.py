"""CLI commands of the mail area: `envelopay mail ...` (H6) and `envelopay garden ...` (H5)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    _register_mail(app)
    _register_garden(app)


# Option types of `envelopay mail` (module level: typer evaluates the string annotations here).
DirOpt = Annotated[
    Path | None,
    typer.Option("--dir", help="The agent directory (default: $ENVELOPAY_AGENT_DIR, else the current one)."),
]
AddressOpt = Annotated[
    str | None, typer.Option("--address", help="This agent's own address (default: $ENVELOPAY_ADDRESS).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A worker config (default: $ENVELOPAY_CONFIG, else ./envelopay.toml when present); used when "
        "--dir and $ENVELOPAY_AGENT_DIR are not given: its directory, agent address and garden inbox.",
    ),
]


def _register_mail(app: typer.Typer) -> None:
    """`envelopay mail ...`: the agent mailbox commands (owned by the mailbox work)."""
    import json
    import os
    from collections.abc import Iterator
    from contextlib import contextmanager
    from datetime import datetime
    from typing import Any

    mail = typer.Typer(
        help="The agent mailbox: check, search, read, archive, delete, reply, contacts, threads.",
        no_args_is_help=True,
    )
    app.add_typer(mail, name="mail")

    def usage_error(
        message: str, as_json: bool = False, code: str = "usage", field: str | None = None
    ) -> typer.Exit:
        if as_json:
            typer.echo(json.dumps({"error": code, "field": field, "detail": message}))
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    @contextmanager
    def open_box(
        directory: Path | None, config: Path | None, address: str | None, as_json: bool
    ) -> Iterator[Any]:
        from envelopay.errors import ConfigError, UsageError
        from envelopay.mail.mailbox import Mailbox, MailboxError

        env_dir = os.environ.get("ENVELOPAY_AGENT_DIR")
        where = directory or (Path(env_dir) if env_dir else None)
        addr = address or os.environ.get("ENVELOPAY_ADDRESS") or None
        inbox: Path | None = None
        # An explicit --config always applies; otherwise a config is a default only when
        # no directory was given at all.
        if config is None and where is None:
            env_cfg = os.environ.get("ENVELOPAY_CONFIG")
            if env_cfg:
                config = Path(env_cfg)
            elif Path("envelopay.toml").is_file():
                config = Path("envelopay.toml")
        if config is not None:
            from envelopay.agent.config import load_config
            from envelopay.mail.maildir import mailbox_path

            try:
                cfg = load_config(config)
            except ConfigError as exc:
                raise usage_error(f"config: {exc}", as_json, field="config") from exc
            where = where or Path(cfg.base_dir)
            addr = addr or cfg.agent.address
            if cfg.transport.kind == "garden":
                # The worker's garden Maildir is this agent's inbox.
                inbox = mailbox_path(cfg.path(cfg.transport.garden_root), cfg.agent.address)
        try:
            box = Mailbox(where or Path("."), address=addr, inbox=inbox)
        except MailboxError as exc:
            raise usage_error(str(exc), as_json, exc.code, exc.field) from exc
        except OSError as exc:
            raise usage_error(
                f"dir: cannot open the mailbox under {where}: {exc.strerror or exc}", as_json, field="dir"
            ) from exc
        try:
            box.refresh()  # pick up garden deliveries first
            yield box
        except MailboxError as exc:
            raise usage_error(str(exc), as_json, exc.code, exc.field) from exc
        except UsageError as exc:
            raise usage_error(str(exc), as_json) from exc
        finally:
            box.close()

    def when(value: str | None, field: str, as_json: bool) -> datetime | None:
        if value is None:
            return None
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError as exc:
            raise usage_error(
                f"{field}: not an ISO 8601 timestamp: {value!r}", as_json, "invalid_filter", field
            ) from exc
        if parsed.tzinfo is None:
            raise usage_error(
                f"{field}: give a timezone, e.g. {value}+00:00", as_json, "invalid_filter", field
            )
        return parsed

    def show(records: list[Any], as_json: bool, *, with_body: bool = False, title: str = "") -> None:
        if as_json:
            typer.echo(json.dumps([r.as_dict(with_body=with_body) for r in records], ensure_ascii=False))
            return
        from rich.console import Console
        from rich.table import Table

        console = Console(soft_wrap=False, width=max(100, Console().width))
        if with_body:
            for r in records:
                console.rule(f"{r.id} · {r.folder}")
                console.print(
                    f"From: {r.from_addr}\nTo: {', '.join(r.to_addrs)}", markup=False, highlight=False
                )
                if r.cc_addrs:
                    console.print(f"Cc: {', '.join(r.cc_addrs)}", markup=False, highlight=False)
                console.print(
                    f"Subject: {r.subject}\nDate: {r.date.isoformat()}", markup=False, highlight=False
                )
                if r.status != "ok":
                    console.print(f"Status: {r.status} ({'; '.join(r.problems)})", markup=False)
                for a in r.attachments:
                    console.print(f"Attachment: {a.filename} ({a.size} bytes) {a.path or ''}", markup=False)
                console.print("")
                console.print(r.body, markup=False, highlight=False)
            return
        table = Table(title=title or None)
        for col in ("id", "date", "from", "subject", "preview"):
            table.add_column(col, overflow="fold")
        for r in records:
            mark = "" if r.read or r.folder != "inbox" else "● "
            flags = (" 📎" if r.attachments else "") + (" ⚠" if r.status != "ok" else "")
            table.add_row(
                r.id,
                r.date.strftime("%Y-%m-%d %H:%M"),
                r.from_addr,
                f"{mark}{r.subject}{flags}",
                r.preview.replace("\n", " "),
            )
        console.print(table)
        if not records:
            console.print("(no messages)")

    @mail.command("check")
    def check(
        folder: Annotated[str, typer.Option(help="inbox, sent, archive or outbox.")] = "inbox",
        from_: Annotated[
            str | None, typer.Option("--from", help="Sender contains (case-insensitive).")
        ] = None,
        subject: Annotated[str | None, typer.Option(help="Subject contains.")] = None,
        contains: Annotated[str | None, typer.Option(help="Subject or body contains.")] = None,
        after: Annotated[str | None, typer.Option(help="Stored after this ISO 8601 time.")] = None,
        before: Annotated[str | None, typer.Option(help="Stored before this ISO 8601 time.")] = None,
        unread_only: Annotated[bool, typer.Option("--unread-only", help="Only unread inbox mail.")] = False,
        has_attachments: Annotated[
            bool | None,
            typer.Option("--has-attachments/--no-attachments", help="With / without attachments."),
        ] = None,
        sort: Annotated[str, typer.Option(help="newest or oldest.")] = "newest",
        n: Annotated[int, typer.Option("-n", help="How many messages.")] = 10,
        truncate: Annotated[int, typer.Option(help="Preview characters; 0 = the full body.")] = 500,
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List a folder, newest first, with filters."""
        from envelopay.mail.mailbox import CheckFilter

        with open_box(directory, config, address, as_json) as box:
            flt = CheckFilter(
                from_=from_,
                subject=subject,
                contains=contains,
                after=when(after, "after", as_json),
                before=when(before, "before", as_json),
                unread_only=unread_only,
                has_attachments=has_attachments,
                sort=sort,  # type: ignore[arg-type]  # validated by CheckFilter
                n=n,
                truncate=truncate,
            )
            show(box.check(folder, flt), as_json, title=folder)

    @mail.command("search")
    def search(
        query: Annotated[str, typer.Argument(help="A regular expression (sender, subject, body).")],
        folder: Annotated[str | None, typer.Option(help="One folder (default: inbox and sent).")] = None,
        truncate: Annotated[int, typer.Option(help="Preview characters; 0 = the full body.")] = 500,
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Regex search over sender, subject and body."""
        with open_box(directory, config, address, as_json) as box:
            show(box.search(query, folder, truncate=truncate), as_json, title=f"search {query}")

    @mail.command("read")
    def read(
        ids: Annotated[list[str], typer.Argument(help="Mailbox ids (from check or search).")],
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Show messages in full; inbox messages become read."""
        with open_box(directory, config, address, as_json) as box:
            show(box.read(ids), as_json, with_body=True)

    @mail.command("dismiss")
    def dismiss(
        ids: Annotated[list[str], typer.Argument(help="Inbox ids to mark read.")],
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Mark inbox messages read without showing them."""
        with open_box(directory, config, address, as_json) as box:
            count = box.dismiss(ids)
            typer.echo(json.dumps({"dismissed": count}) if as_json else f"{count} marked read")

    @mail.command("archive")
    def archive(
        ids: Annotated[list[str], typer.Argument(help="Inbox ids to archive.")],
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Move inbox messages to the archive."""
        with open_box(directory, config, address, as_json) as box:
            moved = box.archive(ids)
            typer.echo(
                json.dumps({"archived": [r.id for r in moved]}) if as_json else f"{len(moved)} archived"
            )

    @mail.command("delete")
    def delete(
        ids: Annotated[list[str], typer.Argument(help="Inbox or archive ids to delete for good.")],
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Delete inbox/archive messages permanently (sent mail is refused)."""
        with open_box(directory, config, address, as_json) as box:
            count = box.delete(ids)
            typer.echo(json.dumps({"deleted": count}) if as_json else f"{count} deleted")

    @mail.command("thread")
    def thread(
        message: Annotated[str, typer.Argument(help="Any message id of the thread.")],
        truncate: Annotated[int, typer.Option(help="Preview characters; 0 = the full body.")] = 200,
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """The whole conversation (all folders) grouped by References, oldest first."""
        with open_box(directory, config, address, as_json) as box:
            show(box.thread(message, truncate=truncate), as_json, title="thread")

    @mail.command("reply")
    def reply(
        message: Annotated[str, typer.Argument(help="The id of the message to answer.")],
        text: Annotated[str | None, typer.Option("--message", "-m", help="The reply text.")] = None,
        text_file: Annotated[
            Path | None,
            typer.Option("--message-file", help="Read the reply text from this file ('-': stdin)."),
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
        directory: DirOpt = None,
        config: ConfigOpt = None,
        address: AddressOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Reply with threading headers (In-Reply-To, References, `Re:` subject)."""
        import asyncio
        import sys

        from envelopay.errors import ConfigError
        from envelopay.mail.mailbox import smtp_send_fn
        from envelopay.mail.smtp import SmtpConfig

        if (text is None) == (text_file is None):
            raise usage_error(
                "message: give exactly one of --message or --message-file", as_json, field="message"
            )
        if text is None:
            assert text_file is not None
            try:
                text = sys.stdin.read() if str(text_file) == "-" else text_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise usage_error(
                    f"message-file: cannot read {text_file}: {exc}", as_json, field="message-file"
                ) from exc
        target = smtp or os.environ.get("ENVELOPAY_SMTP")
        if not target:
            raise usage_error(
                "smtp: no transport; pass --smtp host:port or set ENVELOPAY_SMTP", as_json, field="smtp"
            )
        host, sep, port = target.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise usage_error(f"smtp: expected host:port, got {target!r}", as_json, field="smtp")
        user, password = os.environ.get("ENVELOPAY_SMTP_USER"), os.environ.get("ENVELOPAY_SMTP_PASSWORD")
        try:
            cfg = SmtpConfig(
                host=host,
                port=int(port),
                security=security,  # type: ignore[arg-type]  # SmtpConfig validates it
                username=user,
                password=password,
                max_attempts=2,
                backoff_initial=0.5,
            )
        except ConfigError as exc:
            raise usage_error(f"smtp: {exc}", as_json, field="smtp") from exc
        with open_box(directory, config, address, as_json) as box:
            result = asyncio.run(
                box.reply(smtp_send_fn(cfg), message, text, reply_all=reply_all, attachments=attach or ())
            )
        payload = {
            "status": result.status,
            "id": result.id,
            "message_id": result.message_id,
            "detail": result.detail,
        }
        typer.echo(
            json.dumps(payload)
            if as_json
            else f"{result.status}: {result.id or '-'} {result.message_id or ''} {result.detail}".rstrip()
        )
        if result.status not in ("sent", "pending_approval"):
            raise typer.Exit(1)

    @mail.command("fetch")
    def fetch(
        imap: Annotated[str, typer.Option(help="IMAP server host:port.")],
        user: Annotated[str, typer.Option(help="IMAP login name.")],
        mailbox_name: Annotated[str, typer.Option("--mailbox", help="The IMAP folder to read.")] = "INBOX",
        tls: Annotated[bool, typer.Option("--tls/--no-tls", help="Implicit TLS (IMAPS).")] = True,
        idle: Annotated[bool, typer.Option("--idle", help="Keep running: IDLE push with reconnect.")] = False,
        directory: DirOpt = None,
        config: ConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Copy unprocessed IMAP mail into the inbox; each message is flagged
        $EnvelopayProcessed on the server only after it is stored. The password comes from
        $ENVELOPAY_IMAP_PASSWORD (never the command line)."""
        import asyncio
        import signal

        from envelopay.errors import ConfigError, TransportError
        from envelopay.mail.imap import ImapConfig, ImapSource, SyncState

        password = os.environ.get("ENVELOPAY_IMAP_PASSWORD")
        if not password:
            raise usage_error("password: set ENVELOPAY_IMAP_PASSWORD", as_json, field="password")
        host, sep, port = imap.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise usage_error(f"imap: expected host:port, got {imap!r}", as_json, field="imap")
        try:
            cfg = ImapConfig(
                host=host, port=int(port), user=user, password=password, mailbox=mailbox_name, tls=tls
            )
        except ConfigError as exc:
            raise usage_error(str(exc), as_json, field=str(exc).split(":")[0]) from exc
        with open_box(directory, config, None, as_json) as box:
            state = SyncState.load(box.root / "imap-state.json")
            source = ImapSource(cfg, state)

            async def run() -> int:
                if not idle:
                    return await source.sync_once(box.imap_consumer)
                stop = asyncio.Event()
                loop = asyncio.get_running_loop()
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, stop.set)
                typer.echo(f"fetching {user}@{host}:{port}/{mailbox_name} (IDLE); Ctrl-C stops", err=True)
                await source.run(box.imap_consumer, stop)
                return source.stats.marked

            try:
                stored = asyncio.run(run())
            except TransportError as exc:
                typer.echo(f"error: {exc}", err=True)
                raise typer.Exit(1) from exc
        typer.echo(json.dumps({"stored": stored}) if as_json else f"{stored} message(s) stored")

    contacts = typer.Typer(help="The private contact book.", no_args_is_help=True)
    mail.add_typer(contacts, name="contacts")

    @contacts.command("list")
    def contacts_list(directory: DirOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
        """List contacts."""
        with open_box(directory, config, None, as_json) as box:
            items = box.contacts.list()
            if as_json:
                typer.echo(
                    json.dumps([{"address": c.address, "name": c.name, "note": c.note} for c in items])
                )
                return
            from rich.console import Console
            from rich.table import Table

            table = Table(title="contacts")
            for col in ("address", "name", "note"):
                table.add_column(col)
            for c in items:
                table.add_row(c.address, c.name, c.note)
            Console().print(table)

    @contacts.command("add")
    def contacts_add(
        contact: Annotated[str, typer.Argument(help="The contact's address.")],
        name: Annotated[str, typer.Option(help="Display name.")] = "",
        note: Annotated[str, typer.Option(help="A private note.")] = "",
        directory: DirOpt = None,
        config: ConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Add a contact, or replace the one with this address."""
        with open_box(directory, config, None, as_json) as box:
            c = box.contacts.add(contact, name=name, note=note)
            typer.echo(
                json.dumps({"address": c.address, "name": c.name, "note": c.note})
                if as_json
                else f"saved {c.address}"
            )

    @contacts.command("edit")
    def contacts_edit(
        contact: Annotated[str, typer.Argument(help="The contact's address.")],
        name: Annotated[str | None, typer.Option(help="New display name.")] = None,
        note: Annotated[str | None, typer.Option(help="New note.")] = None,
        directory: DirOpt = None,
        config: ConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Change only the given fields of a contact."""
        with open_box(directory, config, None, as_json) as box:
            c = box.contacts.edit(contact, name=name, note=note)
            typer.echo(
                json.dumps({"address": c.address, "name": c.name, "note": c.note})
                if as_json
                else f"updated {c.address}"
            )

    @contacts.command("remove")
    def contacts_remove(
        contact: Annotated[str, typer.Argument(help="The contact's address.")],
        directory: DirOpt = None,
        config: ConfigOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Remove a contact."""
        with open_box(directory, config, None, as_json) as box:
            removed = box.contacts.remove(contact)
        typer.echo(
            json.dumps({"removed": removed}) if as_json else ("removed" if removed else "no such contact")
        )
        if not removed:
            raise typer.Exit(1)


def _register_garden(app: typer.Typer) -> None:
    """`envelopay garden ...`: the walled-garden LMTP transport."""
    garden = typer.Typer(
        help="The walled garden: LMTP on loopback into per-address Maildirs.", no_args_is_help=True
    )
    app.add_typer(garden, name="garden")

    def fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    @garden.command("serve")
    def serve(
        root: Annotated[Path, typer.Option("--root", help="Directory holding one Maildir per address.")],
        address: Annotated[
            list[str], typer.Option("--address", "-a", help="A garden address (repeat for each).")
        ],
        host: Annotated[str, typer.Option(help="Loopback address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 2424,
        socket: Annotated[
            Path | None, typer.Option("--socket", help="Listen on this Unix socket instead of TCP.")
        ] = None,
        fsync: Annotated[bool, typer.Option("--fsync/--no-fsync", help="fsync each delivery.")] = True,
    ) -> None:
        """Run the garden's LMTP server until interrupted (SIGINT / SIGTERM)."""
        import asyncio
        import signal

        from envelopay.errors import ConfigError, UsageError
        from envelopay.mail.garden import GardenServer

        try:
            server = GardenServer(root, address, host=host, port=port, unix_path=socket, fsync=fsync)
        except (ConfigError, UsageError) as exc:
            raise fail(str(exc)) from exc

        async def run() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            async with server:
                ep = server.endpoint
                where = f"unix:{ep}" if isinstance(ep, Path) else f"{ep[0]}:{ep[1]}"
                typer.echo(f"garden listening on {where} for {len(server.addresses)} address(es)")
                for addr in sorted(server.addresses):
                    typer.echo(f"  {addr} -> {server.maildir(addr)}")
                await stop.wait()
            typer.echo(f"garden stopped: {server.stats.delivered} delivered")

        try:
            asyncio.run(run())
        except OSError as exc:
            raise fail(f"cannot listen: {exc.strerror or exc}") from exc

    @garden.command("deliver")
    def deliver_cmd(
        file: Annotated[str, typer.Argument(help="A raw message file, or - for stdin.")],
        to: Annotated[list[str], typer.Option("--to", help="Envelope recipient (repeat for each).")],
        sender: Annotated[str, typer.Option("--from", help="Envelope sender ('' for none).")] = "",
        endpoint: Annotated[
            str, typer.Option(help="host:port or a Unix socket path of the garden.")
        ] = "127.0.0.1:2424",
    ) -> None:
        """Deliver one message into the garden over LMTP; print one line per recipient."""
        import asyncio
        import sys

        from envelopay.errors import TransportError, UsageError
        from envelopay.mail.garden import Endpoint, deliver

        try:
            raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        except OSError as exc:
            raise fail(f"cannot read {file}: {exc.strerror or exc}") from exc
        host, sep, port = endpoint.rpartition(":")
        is_tcp = bool(sep) and port.isdigit() and "/" not in endpoint
        target: Endpoint = (host, int(port)) if is_tcp else Path(endpoint)
        try:
            result = asyncio.run(deliver(raw, sender, to, target))
        except UsageError as exc:
            raise fail(str(exc)) from exc
        except TransportError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        for rcpt, reply in result.replies.items():
            typer.echo(f"{rcpt}: {reply.code} {reply.text}")
        if result.refused:
            raise typer.Exit(1)
