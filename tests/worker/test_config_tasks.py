"""Worker config (TOML) and declared tasks: no code payloads, problems as values."""

from __future__ import annotations

from pathlib import Path

import pytest

from envelopay.config import load_config
from envelopay.errors import ConfigError
from envelopay.protocol.codes import OopsCode
from envelopay.worker.tasks import TaskBook, TaskError, TaskRequest

GOOD = """
[agent]
address = "Worker@Garden.local"
domain = "garden.local"

[[accept]]
chain = "solana-local"
token = "USDC"
wallet = "W1"

[[tasks]]
name = "word_count"
handler = "envelopay.worker.operations:word_count"
schema = "envelopay.worker.operations:WordCount"
price = "250000"
prices = { "base-local/USDC" = "300000" }

[[tasks]]
name = "digest"
handler = "envelopay.worker.operations:digest"
schema = "envelopay.worker.operations:Digest"
"""


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "worker.toml"
    p.write_text(text)
    return p


def test_config_loads_and_prices(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.agent.address == "worker@garden.local"
    t = cfg.task("word_count")
    assert t is not None
    assert t.price_for("solana-local", "USDC") == 250000
    assert t.price_for("base-local", "USDC") == 300000
    assert cfg.task("nope") is None
    assert cfg.path("keys/x").is_absolute()


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (GOOD.replace('price = "250000"', 'price = "2.5"'), "tasks.0.price"),
        (GOOD.replace('address = "Worker@Garden.local"', 'address = "a@b, c@d"'), "agent.address"),
        (GOOD.replace("envelopay.worker.operations:digest", "os.system"), "tasks.1.handler"),
        (GOOD + "\n[bogus]\nx = 1\n", "bogus"),
        (GOOD.replace('name = "digest"', 'name = "word_count"'), "tasks"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text))
    assert field in str(err.value)


def test_unreadable_and_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(_write(tmp_path, "[agent\n"))


def test_handler_must_resolve(tmp_path: Path) -> None:
    text = GOOD.replace("operations:digest\"", "operations:no_such\"")
    cfg = load_config(_write(tmp_path, text))
    with pytest.raises(ConfigError, match="no_such"):
        TaskBook.from_config(cfg)


@pytest.fixture
def book(tmp_path: Path) -> TaskBook:
    return TaskBook.from_config(load_config(_write(tmp_path, GOOD)))


async def test_task_runs_declared_handler(book: TaskBook) -> None:
    req = book.resolve({"name": "word_count", "text": "one two three"})
    assert isinstance(req, TaskRequest)
    assert await book.run(req) == {"words": 3, "characters": 13}


@pytest.mark.parametrize(
    ("task", "code", "field"),
    [
        ({"name": "rm_rf"}, OopsCode.UNKNOWN_TASK, "task.name"),
        ("exec", OopsCode.UNKNOWN_TASK, "task.name"),
        ({"text": "no name"}, OopsCode.INVALID_FIELD, "task.name"),
        ({"name": "word_count"}, OopsCode.INVALID_FIELD, "task.text"),
        ({"name": "word_count", "text": 5}, OopsCode.INVALID_FIELD, "task.text"),
        ({"name": "word_count", "text": "x", "code": "import os"}, OopsCode.INVALID_FIELD, "task.code"),
        ({"name": "envelopay.worker.operations:word_count", "text": "x"}, OopsCode.UNKNOWN_TASK, "task.name"),
        (["word_count"], OopsCode.INVALID_FIELD, "task"),
    ],
)
def test_task_refusals_are_values(book: TaskBook, task: object, code: OopsCode, field: str) -> None:
    out = book.resolve(task)
    assert isinstance(out, TaskError)
    assert out.code == code
    assert out.field == field


async def test_failing_handler_is_task_failed(tmp_path: Path) -> None:
    # The operator's handler is any importable module outside envelopay (resolve_ref imports it
    # by name); one of the tests' own stands in for it, so no import path is edited here.
    text = GOOD.replace("envelopay.worker.operations:digest", "tests.worker._refund_tasks:fail")
    book = TaskBook.from_config(load_config(_write(tmp_path, text)))
    req = book.resolve({"name": "digest", "text": "x"})
    assert isinstance(req, TaskRequest)
    out = await book.run(req)
    assert isinstance(out, TaskError)
    assert out.code == OopsCode.TASK_FAILED
    assert "RuntimeError" in out.detail and "reviewer broke" not in out.detail  # its type, not its words
