"""Options that several commands share, written once.

An `OptionSet` is a group of typer options plus the value they build. Decorating a
command with it splices the options into the signature typer reads (after the
command's own options, or before them with `first`) and hands the command one value
object as its first argument:

    @mail.command("read")
    @MAILBOX_AS
    def read(where: MailboxOptions, ids: ...) -> None: ...

Every command has `--json` (JsonOpt): one more field of a set, or an option of its own.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Concatenate, Generic, ParamSpec, TypeVar

import typer

from envelopay.cli.output import fail, set_json_mode

B = TypeVar("B")
P = ParamSpec("P")

def _json_mode(value: bool) -> bool:
    return set_json_mode(value)


# Every command's --json (README "Output and exit codes"). Eager, so the JSON mode is
# known before another option's value can be refused: that refusal is a JSON document too.
JsonOpt = Annotated[bool, typer.Option(
    "--json", is_eager=True, callback=_json_mode,
    help="Print one JSON document on stdout (README \"Output and exit codes\"); progress goes to stderr.")]


@dataclass(frozen=True)
class OptionSet(Generic[B]):
    """Typer options declared once; `build` turns their values into the command's first argument."""

    params: tuple[inspect.Parameter, ...]
    build: Callable[..., B]
    first: bool = False  # the set's options before the command's own (else after them)
    # Refuse, before the command runs, any text option holding what no mail or ledger row
    # can hold (a lone surrogate: argv bytes that are not UTF-8; NUL): exit 2, named.
    plain_text: bool = False

    def __call__(self, command: Callable[Concatenate[B, P], None]) -> Callable[P, None]:
        hints = typing.get_type_hints(command, include_extras=True)
        own = list(inspect.signature(command).parameters.values())[1:]
        # Typer passes every parameter by keyword; keyword-only lets defaults come in any order.
        own = [p.replace(annotation=hints.get(p.name, p.annotation), kind=p.KEYWORD_ONLY) for p in own]
        names = [p.name for p in self.params]

        params = [*self.params, *own] if self.first else [*own, *self.params]
        flags = {p.name: _flag(p) for p in params} if self.plain_text else {}

        @functools.wraps(command)
        def run(*args: P.args, **kwargs: P.kwargs) -> None:
            _refuse_bad_text(kwargs, flags)
            shared = {name: kwargs.pop(name) for name in names}
            command(self.build(**shared), *args, **kwargs)

        run.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return run


def _flag(param: inspect.Parameter) -> str:
    """How the user typed a parameter: its option (`--wallet`) or argument (`ADDRESS`)."""
    for info in typing.get_args(param.annotation)[1:]:
        if isinstance(info, typer.models.ArgumentInfo):
            return param.name.upper()
        if isinstance(info, typer.models.OptionInfo):
            decls = [info.default, *(info.param_decls or ())]
            named = [d for d in decls if isinstance(d, str) and d.startswith("--")]
            if named:
                return named[0]
    if param.default is inspect.Parameter.empty:
        return param.name.upper()
    return f"--{param.name.replace('_', '-')}"


def _refuse_bad_text(values: dict[str, Any], flags: dict[str, str]) -> None:
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.protocol.outside_json import text_ok

    for name, flag in flags.items():
        value = values.get(name)
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(t, str) and not text_ok(t) for t in texts):
            fail(f"{flag}: not valid text (a lone surrogate: bytes that are not UTF-8, or NUL)")


def option(name: str, annotation: Any, default: Any = None) -> inspect.Parameter:
    """One keyword parameter of an option set."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


# -- one page of a list that grows (agents, approvals, flows) ---------------------------------

LimitOpt = Annotated[int, typer.Option("--limit", min=1, max=500, help="Rows in this page (1-500).")]
# A TCP port a command listens on or connects to: past 65535 it reached bind() as an
# OverflowError traceback (issue 29).
MAX_PORT = 65_535
# Rows in one transaction of a compact command: at most 100,000 (2**63 overflowed SQLite's
# INTEGER, a traceback; a transaction that large holds the ledger's lock for too long).
MAX_BATCH = 100_000
AfterOpt = Annotated[
    str | None, typer.Option("--after", help="Go on after this page token (printed under the previous page).")
]
# At most a century: beyond it a cutoff is not a date (datetime's range, JSON has no -Infinity).
MAX_RETENTION_DAYS = 36_500.0
OlderThanOpt = Annotated[
    float,
    typer.Option("--older-than", min=0.0, max=MAX_RETENTION_DAYS,
                 help="Retention window in days (at most 36,500): older than this goes."),
]


# -- the agent mailbox (`envelopay mail ...`) --------------------------------------------------

DirOpt = Annotated[
    Path | None,
    typer.Option("--dir", help="The agent directory (default: $ENVELOPAY_AGENT_DIR, else the current one)."),
]
AddressOpt = Annotated[
    str | None, typer.Option("--address", help="This agent's own address (default: $ENVELOPAY_ADDRESS).")
]
MailConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="A worker config (default: $ENVELOPAY_CONFIG, else ./envelopay.toml when present); used when "
        "--dir and $ENVELOPAY_AGENT_DIR are not given: its directory, agent address and garden inbox.",
    ),
]


@dataclass(frozen=True)
class MailboxOptions:
    """Which mailbox a mail command opens, and how it answers."""

    directory: Path | None
    config: Path | None
    address: str | None
    as_json: bool


def _mailbox(
    directory: Path | None, config: Path | None, as_json: bool, address: str | None = None
) -> MailboxOptions:
    return MailboxOptions(directory, config, address, as_json)


_DIR, _CONFIG, _JSON = option("directory", DirOpt), option("config", MailConfigOpt), option(
    "as_json", JsonOpt, False
)

# --dir --config --address --json
MAILBOX_AS = OptionSet((_DIR, _CONFIG, option("address", AddressOpt), _JSON), _mailbox, plain_text=True)
# --dir --config --json (commands that never send as this agent)
MAILBOX = OptionSet((_DIR, _CONFIG, _JSON), _mailbox, plain_text=True)


# -- the send enforcer's operator commands -----------------------------------------------------

DEFAULT_ENFORCER_URL = "http://127.0.0.1:8725"
DEFAULT_TOKEN_FILE = "enforcer-operator.token"

EnforcerUrlOpt = Annotated[
    str, typer.Option("--enforcer", envvar="ENVELOPAY_ENFORCER", help="Enforcer URL or Unix socket path.")
]
TokenFileOpt = Annotated[
    Path,
    typer.Option("--operator-token-file", envvar="ENVELOPAY_OPERATOR_TOKEN_FILE",
                 help="File holding the operator credential."),
]


@dataclass(frozen=True)
class OperatorOptions:
    """Which enforcer an operator command talks to, where its credential is, and how it answers."""

    url: str
    token_file: Path
    as_json: bool = False


# --enforcer --operator-token-file --json
OPERATOR = OptionSet(
    (option("url", EnforcerUrlOpt, DEFAULT_ENFORCER_URL),
     option("token_file", TokenFileOpt, Path(DEFAULT_TOKEN_FILE)), option("as_json", JsonOpt, False)),
    OperatorOptions,
    plain_text=True,
)


# -- retention (`enforcer compact`, `garden compact`, `ledger compact`) -----------------------


@dataclass(frozen=True)
class Retention:
    """How old is old enough to go, and how the compact command answers."""

    older_than: float  # days
    as_json: bool

    @property
    def seconds(self) -> float:
        return self.older_than * 86_400


# --older-than --json
RETENTION = OptionSet(
    (option("older_than", OlderThanOpt, 30.0), option("as_json", JsonOpt, False)), Retention
)


# -- one payment on a rail (`verify`, `pay-onchain`) -----------------------------------------


@dataclass(frozen=True)
class PaymentOptions:
    """The payment a rails command verifies or makes: chain, asset, amount (as typed), recipient."""

    chain: str
    token: str
    amount: str
    to: str


def payment_options(chain_help: str, token_help: str) -> OptionSet[PaymentOptions]:
    """--chain --token --amount --to, first on the command line."""

    def required(name: str, help: str) -> inspect.Parameter:
        return option(name, Annotated[str, typer.Option(f"--{name}", help=help)], inspect.Parameter.empty)

    return OptionSet(
        (required("chain", chain_help), required("token", token_help),
         required("amount", "Amount in the asset's smallest unit."), required("to", "The recipient wallet.")),
        PaymentOptions,
        first=True,
    )


# -- the client messages (`which`, `order`, `pay`, ...) ---------------------------------------

ClientConfigOpt = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]
WaitOpt = Annotated[bool, typer.Option("--wait", help="Follow the flow until the answer arrives "
                                       "(progress on stderr).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait (positive).")]


@dataclass(frozen=True)
class ClientOptions:
    """Which agent a client command runs as, whether it waits, and how it answers."""

    config: Path
    as_json: bool
    wait: bool
    timeout: float


# --config --json --wait --timeout
CLIENT = OptionSet(
    (option("config", ClientConfigOpt, Path("envelopay.toml")), option("as_json", JsonOpt, False),
     option("wait", WaitOpt, False), option("timeout", TimeoutOpt, 60.0)),
    ClientOptions,
    plain_text=True,
)
# --config --json (the commands that read the ledger)
LEDGER = OptionSet(
    (option("config", ClientConfigOpt, Path("envelopay.toml")), option("as_json", JsonOpt, False)),
    lambda config, as_json: ClientOptions(config, as_json, False, 0.0),
    plain_text=True,
)
