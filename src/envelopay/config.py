"""Worker configuration (TOML): who the worker is, what it accepts, what it sells.

A task is declared here, never received: the config names a handler ("module:function")
and a pydantic request schema ("module:Class") for each task. An ORDER only names a
declared task and supplies data fields; nothing received is executed or evaluated.

Example (what `envelopay init` writes)::

    [agent]
    address = "worker@garden.local"
    domain = "garden.local"
    ledger = "var/worker.db"          # SQLite file, or a postgresql:// DSN
    dkim_selector = "ep1"
    dkim_key = "keys/dkim.pem"
    dkim_policy = "prefer"            # required | prefer | off
    proof_binding = "solicited"       # required | solicited (SPEC.md "Proof binding")
    profile = "strict"                # strict | lenient (interop profile, SPEC.md)
    extensions = ["status"]           # WAIT/WHATSUP (SPEC.md "Status while working"); [] for none

    [answers]                         # automatic answers (SPEC.md "Automatic answers (RFC 3834)")
    per_peer = 300                    # at most this many to one peer per window (0: no limit)
    per_thread = 20                   # at most this many in one thread per window (0: no limit)
    window = 3600                     # seconds
    help = false                      # one help note a day to a sender of non-protocol mail

    [transport]
    kind = "garden"                   # garden | smtp | agentmail
    garden_root = "var/garden"

    [rails.solana]                    # options passed to the rail's make_rail()
    backend = "local"
    keypair = "keys/solana.json"

    [[accept]]
    chain = "solana-local"
    token = "USDC"
    wallet = "..."                    # this worker's wallet on that chain

    [[tasks]]
    name = "word_count"
    handler = "envelopay.worker.operations:word_count"
    schema = "envelopay.worker.operations:WordCount"
    price = "250000"                  # smallest units, on every accepted rail
    prices = { "base-local/USDC" = "300000" }   # optional per-rail override
"""

from __future__ import annotations

import importlib
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from envelopay.errors import ConfigError

__all__ = [
    "AcceptedRail",
    "AgentSection",
    "AnswersConfig",
    "ExchangePair",
    "RefundsConfig",
    "ResponderConfig",
    "TaskConfig",
    "TransportConfig",
    "WorkerConfig",
    "load_config",
    "resolve_ref",
]

_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_DIGITS = re.compile(r"^[0-9]{1,78}$")
_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _speaks_status() -> list[Literal["status"]]:
    return ["status"]


class AgentSection(_Section):
    address: str
    domain: str
    ledger: str = "var/agent.db"
    dkim_selector: str = "ep1"
    dkim_key: str | None = None
    dkim_policy: Literal["required", "prefer", "off"] = "prefer"
    # table: [dkim_records] below (garden); devnet: those, then every agent registered with
    # the devnet at devnet_home (envelopay.devnet.registry)
    dkim_dns: Literal["table", "resolver", "devnet"] = "table"
    devnet_home: str | None = None
    # SPEC.md "Proof binding": "required" refuses every unbound proof; "solicited" lets an
    # unbound one pay our own INVOICE / OFFER (v0.1 payers).
    proof_binding: Literal["required", "solicited"] = "solicited"
    worker_id: str | None = None  # stable across restarts of one worker process
    # The parse profile of this mailbox: "lenient" reads peers that bend the spec (SPEC.md
    # "Interop profile `lenient`"); each reading applied is listed in the Outcome.
    profile: Literal["strict", "lenient"] = "strict"
    # Extensions this mailbox speaks and advertises (SPEC.md "Status while working"):
    # "status" reads WAIT/WHATSUP and names itself in METHODS; [] speaks the nine only.
    extensions: list[Literal["status"]] = Field(default_factory=_speaks_status)

    @field_validator("ledger")
    @classmethod
    def _ledger(cls, v: str) -> str:
        # A URL of another scheme used to become a SQLite file named after it ("mysql:/x").
        if "://" in v and not v.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError(f"{v.split('://')[0]}:// is not a ledger: give a SQLite path, sqlite:///PATH "
                             "or a postgresql:// DSN")
        return v

    @field_validator("address")
    @classmethod
    def _one_address(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9._+-]+@[A-Za-z0-9.-]+", v):
            raise ValueError("must be one bare address like name@domain")
        return v.lower()


class TransportConfig(_Section):
    kind: Literal["garden", "smtp", "agentmail"] = "garden"
    garden_root: str = "var/garden"
    garden_socket: str | None = None  # LMTP over a Unix socket (else lmtp_host:lmtp_port)
    garden_addresses: list[str] = Field(default_factory=list)  # for an embedded garden
    lmtp_host: str = "127.0.0.1"
    lmtp_port: int | None = Field(default=None, ge=1, le=65535)  # past it: an OverflowError at connect
    # Garden authentication (mail.garden_auth; SPEC.md "Walled garden"): this agent's
    # garden secret, in a 0600 file beside the config (`init` writes keys/garden.secret) or
    # an env var (its user is agent.address; never the secret itself in this file); for an
    # embedded garden (`worker serve --garden`), the accounts file of the other senders.
    # An embedded garden authenticates every sender unless garden_open = true (legacy,
    # loud: any local process may then send From any garden address).
    garden_secret_file: str | None = None
    garden_secret_env: str | None = None
    garden_accounts: str | None = None
    garden_open: bool = False
    smtp_host: str | None = None
    smtp_port: int = Field(default=587, ge=1, le=65535)
    smtp_security: Literal["starttls", "tls", "none"] = "starttls"
    smtp_username: str | None = None
    smtp_password_env: str | None = None  # the name of an env var, never the secret itself
    imap_host: str | None = None
    imap_port: int = Field(default=993, ge=1, le=65535)
    imap_tls: bool = True
    imap_user: str | None = None
    imap_password_env: str | None = None
    imap_mailbox: str = "INBOX"
    # The send enforcer as the send hook (it then holds the credential and the DKIM key):
    enforcer: str | None = None  # http(s):// URL or a Unix socket path
    enforcer_token_env: str = "ENVELOPAY_AGENT_TOKEN"  # the env var holding this agent's token
    # AgentMail (kind = "agentmail"; SPEC.md "AgentMail"): the inbox is the agent's address
    # (AgentMail's inbox id); secrets by the names of environment variables only.
    agentmail_api_key_env: str = "AGENTMAIL_API_KEY"
    agentmail_webhook_secret_env: str = "AGENTMAIL_WEBHOOK_SECRET"
    agentmail_base_url: str = "https://api.agentmail.to"
    agentmail_webhook_host: str = "127.0.0.1"  # loopback: the operator's TLS proxy goes in front
    agentmail_webhook_port: int = Field(default=8025, ge=0, le=65535)
    agentmail_webhook_path: str = "/webhooks/agentmail"
    # seconds; 0: webhooks only; at most a day (1e308 overflowed the event loop's timer)
    agentmail_poll_interval: float = Field(default=0.0, ge=0, le=86_400, allow_inf_nan=False)
    agentmail_reply_via: Literal["send", "endpoint"] = "send"
    # "enforcer": the OFFER counter-legs are paid by the spend enforcer from this agent's
    # wallet it holds (same URL and token as the mail), not by the local rails' keys.
    payments: Literal["rails", "enforcer"] = "rails"


class AcceptedRail(_Section):
    chain: str
    token: str
    wallet: str


def _amount_str(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return str(v)
    if not isinstance(v, str) or not _DIGITS.match(v):
        raise ValueError("an amount is a string of decimal digits in the smallest unit")
    return v


class TaskConfig(_Section):
    name: str
    # Exactly one of: a Python callable ("module:function", async, or sync run in a
    # thread), or a command (an argv list, never a shell string: fields as JSON on stdin,
    # the result as JSON on stdout; envelopay.worker.command).
    handler: str = ""
    command: tuple[str, ...] = ()
    schema_ref: str = Field(alias="schema")
    price: str = "0"
    prices: dict[str, str] = Field(default_factory=dict)
    description: str = ""
    # The job runner (envelopay.worker.runner): how many run at once, the wall-clock
    # limit of one attempt, how many attempts, whether a run cut short (a crash) may run
    # again, and what a paid job that fails for good gets: its payment back, or an operator.
    concurrency: int = Field(default=4, ge=1, le=1024)
    time_limit: float = Field(default=600.0, gt=0, le=7 * 86400)
    attempts: int = Field(default=1, ge=1, le=100)
    idempotent: bool = False
    on_failure: Literal["refund", "hold"] = "refund"
    # A Python handler in a process of its own (envelopay.worker.pyproc), run as a command
    # is: killed with its group at the time limit, under memory_mb, with env (and the
    # worker's import path); off, it runs on the event loop (async) or in a thread.
    process: bool = False
    # A command's limits: its address space in MiB, its environment (nothing else is
    # passed), and the folder its per-job working folders are made in (default: the
    # system's temporary folder).
    memory_mb: int = Field(default=2048, ge=16)
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str = ""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    @model_validator(mode="after")
    def _one_handler(self) -> TaskConfig:
        if bool(self.handler) == bool(self.command):
            raise ValueError(f"task {self.name}: give either handler = 'module:function' or command = [argv]")
        if self.command and not all(isinstance(a, str) and a for a in self.command):
            raise ValueError(f"task {self.name}: command is a list of non-empty strings")
        return self

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("task names are lowercase letters, digits, '_', '.', '-'")
        return v

    @field_validator("handler", "schema_ref")
    @classmethod
    def _ref(cls, v: str, info: ValidationInfo) -> str:
        if (v or info.field_name != "handler") and not _REF.match(v):
            raise ValueError("must be 'package.module:name'")
        return v

    @field_validator("price", mode="before")
    @classmethod
    def _price(cls, v: Any) -> str:
        return _amount_str(v)

    @field_validator("prices", mode="before")
    @classmethod
    def _prices(cls, v: Any) -> dict[str, str]:
        if not isinstance(v, Mapping):
            raise ValueError("prices is a table of 'chain/token' = amount")
        for key in v:  # a key of another shape matched no rail and was ignored, silently
            if str(key).count("/") != 1 or not all(str(key).split("/")):
                raise ValueError(f"{str(key)[:60]!r} is not 'chain/token'")
        return {str(k): _amount_str(a) for k, a in v.items()}

    def price_for(self, chain: str, token: str) -> int:
        return int(self.prices.get(f"{chain}/{token}", self.price))


class ResponderConfig(_Section):
    """A deterministic endpoint: an address inside the garden with a schema and a handler."""

    address: str
    handler: str
    schema_ref: str = Field(alias="schema")
    description: str = ""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class RefundsConfig(_Section):
    """`[refunds]` (SPEC.md "Refunds"): an overpayment's excess above this tolerance goes
    back to the payer — smallest units ("2500") or a share of the price ("1%"); "0"
    returns any excess."""

    overpay_tolerance: str = "0"

    @field_validator("overpay_tolerance")
    @classmethod
    def _tolerance(cls, v: str) -> str:
        t = v.strip()
        digits = t[:-1] if t.endswith("%") else t
        whole, _, frac = digits.partition(".")
        ok = whole.isascii() and whole.isdigit() and len(whole) <= 78 and (not frac or frac.isdigit())
        if not ok or (frac and not t.endswith("%")) or (t.endswith("%") and float(digits) > 100):
            raise ValueError('smallest units ("2500") or a percentage up to 100 ("1%")')
        return t


class ExchangePair(_Section):
    """An OFFER this worker accepts: it receives `give`, pays back `want`, at most
    `want_per_unit` (smallest units of want) per `give_unit` (smallest units of give)."""

    give: str  # "chain/token"
    want: str  # "chain/token"
    give_unit: str
    want_per_unit: str
    max_want: str = "0"  # 0: no cap per offer

    @field_validator("give_unit", "want_per_unit", "max_want", mode="before")
    @classmethod
    def _amounts(cls, v: Any) -> str:
        return _amount_str(v)

    @field_validator("give", "want")
    @classmethod
    def _pair(cls, v: str) -> str:
        if v.count("/") != 1 or not all(v.split("/")):
            raise ValueError("must be 'chain/token'")
        return v


class AnswersConfig(_Section):
    """The limits on automatic answers: per peer (a rate limit) and per thread (the loop
    detector), each counted over `window` seconds in the ledger; 0 turns one off."""

    per_peer: int = Field(default=300, ge=0, le=1_000_000)
    per_thread: int = Field(default=20, ge=0, le=1_000_000)
    window: float = Field(default=3600.0, gt=0, le=30 * 86400, allow_inf_nan=False)
    # Mail that is not protocol gets one help note per sender per day (SPEC.md "Mail that
    # is not protocol"); off: it is recorded, never answered.
    help: bool = False


class WorkerConfig(_Section):
    agent: AgentSection
    transport: TransportConfig = TransportConfig()
    rails: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # How long a proof that is not final yet may wait (rails.finality.WaitPolicy.from_options:
    # window, window_<chain>, first, factor, cap; seconds). wait = false in [agent]: refuse at once.
    wait: dict[str, float] = Field(default_factory=dict)

    @field_validator("wait")
    @classmethod
    def _wait(cls, v: dict[str, float]) -> dict[str, float]:
        # Seconds, compared with `<`: NaN compares False (a wait that never ends or never
        # starts), 1e308 overflowed the event loop's timer. A week at most.
        for key, seconds in v.items():
            if not (0 <= seconds <= 604_800):
                raise ValueError(f"{key}: must be 0 to 604,800 seconds (a week), not {seconds}")
        return v
    answers: AnswersConfig = AnswersConfig()
    accept: list[AcceptedRail] = Field(default_factory=list)
    tasks: list[TaskConfig] = Field(default_factory=list)
    responders: list[ResponderConfig] = Field(default_factory=list)
    exchange: list[ExchangePair] = Field(default_factory=list)
    refunds: RefundsConfig = RefundsConfig()
    wallets: dict[str, str] = Field(default_factory=dict)  # chain → wallet, for OFFER give legs
    dkim_records: dict[str, str] = Field(default_factory=dict)  # "sel._domainkey.dom" → TXT
    base_dir: str = "."

    def path(self, value: str) -> Path:
        """A config-relative path made absolute (paths in the file are relative to it)."""
        p = Path(value)
        return p if p.is_absolute() else Path(self.base_dir) / p

    def task(self, name: str) -> TaskConfig | None:
        for t in self.tasks:
            if t.name == name:
                return t
        return None


def load_config(path: str | Path) -> WorkerConfig:
    """Read and validate a TOML config; any problem is a ConfigError naming the field."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")  # TOML is UTF-8 (TOML 1.0, "Spec")
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config {p} is not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {p} is not valid TOML: {exc}") from exc
    except RecursionError as exc:  # tomllib recurses per nested array or inline table
        raise ConfigError(f"config {p} nests arrays or tables too deeply") from exc
    except ValueError as exc:  # an integer past int()'s digit limit
        raise ConfigError(f"config {p} holds a number too long to read (over 4,300 digits)") from exc
    return config_from_dict(data, base_dir=p.resolve().parent)


# pydantic's words for a value of the wrong type, in the project's
_WANTED = {
    "string_type": "must be text (in quotes)", "int_type": "must be a whole number",
    "int_parsing": "must be a whole number", "int_from_float": "must be a whole number",
    "float_type": "must be a number", "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false", "list_type": "must be an array", "dict_type": "must be a table",
    "model_type": "must be a table", "extra_forbidden": "is not a setting of this section",
    "missing": "is required", "literal_error": "", "finite_number": "must be a finite number",
}


_BOUNDS = {"less_than_equal": "must be at most", "greater_than_equal": "must be at least",
           "less_than": "must be less than", "greater_than": "must be more than"}


def config_from_dict(data: Mapping[str, Any], *, base_dir: str | Path = ".") -> WorkerConfig:
    try:
        cfg = WorkerConfig.model_validate({**data, "base_dir": str(base_dir)})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        bound = next(iter((first.get("ctx") or {}).values()), None)
        said = (_WANTED.get(first["type"]) or (f"{_BOUNDS[first['type']]} {bound}" if first["type"] in _BOUNDS
                                               else first["msg"].removeprefix("Value error, ")))
        raise ConfigError(f"config field {where}: {said}") from exc
    names = [t.name for t in cfg.tasks]
    if len(names) != len(set(names)):
        raise ConfigError("config field tasks: task names must be unique")
    return cfg


_MOVED_HANDLERS = {
    ("envelopay.agent.operations", "word_count"): "envelopay.worker.operations",
    ("envelopay.agent.operations", "WordCount"): "envelopay.worker.operations",
    ("envelopay.agent.operations", "digest"): "envelopay.worker.operations",
    ("envelopay.agent.operations", "Digest"): "envelopay.worker.operations",
    ("envelopay.agent.operations", "kv_get"): "envelopay.endpoints.reference",
    ("envelopay.agent.operations", "KvGet"): "envelopay.endpoints.reference",
}


def resolve_ref(ref: str) -> Any:
    """Import 'module:name' from the LOCAL config. Only the operator's config names code;
    a received message can only pick one of the names resolved here."""
    if not _REF.match(ref):
        raise ConfigError(f"{ref!r} is not 'package.module:name'")
    module_name, attr = ref.split(":")
    # Configs written by `envelopay init` before the rooms name the reference handlers'
    # first home; that package is gone, their names are read where they live now.
    module_name = _MOVED_HANDLERS.get((module_name, attr), module_name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for {ref!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ConfigError(f"{module_name!r} has no {attr!r}") from exc

