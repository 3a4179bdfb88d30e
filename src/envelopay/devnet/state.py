"""The devnet's state file: where each shared service listens, found by every command.

The file lives at `devnet_home()/devnet.json`; the home is $ENVELOPAY_DEVNET_HOME, or
~/.envelopay/devnet. It is written (atomically) once everything listens and removed
when the devnet stops, so its presence plus a live pid means "the devnet is up".
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError

__all__ = ["HOME_ENV", "STATE_FILE", "DevnetState", "devnet_home", "pid_alive", "read_state", "write_state"]

HOME_ENV = "ENVELOPAY_DEVNET_HOME"
STATE_FILE = "devnet.json"
VERSION = 1


def devnet_home(explicit: str | Path | None = None) -> Path:
    if explicit is not None:
        return Path(explicit).expanduser().resolve()
    env = os.environ.get(HOME_ENV)
    if env:
        return Path(env).expanduser().resolve()
    return (Path.home() / ".envelopay" / "devnet").resolve()


@dataclass(frozen=True, slots=True)
class SolanaEndpoint:
    rpc_url: str
    slot_time: float
    confirmed_after: int
    finalized_after: int


@dataclass(frozen=True, slots=True)
class BaseEndpoint:
    rpc_url: str
    node: str  # "anvil" | "eth-tester"
    chain_id: int
    block_time: float
    usdc: str
    pid: int | None = None  # anvil's process, when the node is anvil


@dataclass(frozen=True, slots=True)
class DevnetState:
    home: str
    pid: int
    started: str
    solana: SolanaEndpoint
    base: BaseEndpoint
    garden_socket: str
    garden_root: str
    agents_dir: str
    version: int = VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DevnetState:
        try:
            if doc.get("version") != VERSION:
                raise ConfigError(f"devnet state version {doc.get('version')!r}, expected {VERSION}")
            return cls(
                home=str(doc["home"]), pid=int(doc["pid"]), started=str(doc["started"]),
                solana=SolanaEndpoint(**doc["solana"]), base=BaseEndpoint(**doc["base"]),
                garden_socket=str(doc["garden_socket"]), garden_root=str(doc["garden_root"]),
                agents_dir=str(doc["agents_dir"]), extra=dict(doc.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"the devnet state file is damaged: {exc}") from exc


def state_path(home: Path) -> Path:
    return home / STATE_FILE


def write_state(state: DevnetState) -> Path:
    path = state_path(Path(state.home))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_state(home: Path | None = None, *, require_running: bool = True) -> DevnetState:
    """The running devnet's state; ConfigError (with what to do) when there is none."""
    home = home or devnet_home()
    path = state_path(home)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no devnet is running (no {path}); start one with `envelopay devnet up`") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the devnet state {path}: {exc}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"the devnet state {path} is damaged")
    state = DevnetState.from_json(doc)
    if require_running and not pid_alive(state.pid):
        raise ConfigError(f"the devnet recorded in {path} (pid {state.pid}) is not running; "
                          "start one with `envelopay devnet up`")
    return state


def pid_alive(pid: int) -> bool:
    """Whether `pid` still runs. A zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: field 3 of /proc/PID/stat is the state; Z = exited
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] != ["Z"]
