"""The rooms' public names, and the deprecated `envelopay.agent` names that still resolve.

`envelopay.agent` was split by role (docs/DESIGN.md); for one release each old module
re-exports its names from their new homes and warns on import.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

# old module → (new home, names users import from it)
MOVED = {
    "engine": (
        "envelopay.engine",
        ["Engine", "BaseApplication", "Context", "Notice", "Outcome", "Refuse", "Sent"],
    ),
    "outbox": ("envelopay.engine.outbox", ["OutboxDrainer", "DirectHook", "EnforcerHook", "dkim_signer"]),
    "transport": ("envelopay.engine.transport", ["Transport", "DeliveryRefused"]),
    "worker": ("envelopay.worker.app", ["WorkerApp", "WorkerApplication"]),
    "tasks": ("envelopay.worker.tasks", ["TaskBook", "TaskError", "TaskRequest"]),
    "operations": ("envelopay.worker.operations", ["word_count", "WordCount", "digest", "Digest"]),
    "counterpay": ("envelopay.worker.counterpay", ["CounterPayments"]),
    "toolmail": ("envelopay.endpoints.toolmail", ["build_tool_mail", "read_tool_mail"]),
    "responders": ("envelopay.endpoints.responders", ["Responder", "ResponderError"]),
    "calls": ("envelopay.endpoints.calls", ["CallClient", "LedgerCalls"]),
    "node": ("envelopay.node.wiring", ["AgentNode", "build_node", "open_store", "garden_transport"]),
    "runtime": ("envelopay.node.runtime", ["pump", "serve_responders", "serve_call_replies"]),
    "keys": ("envelopay.node.keys", ["generate_keys", "GeneratedKeys"]),
    "init": ("envelopay.node.init", ["init_agent", "InitResult"]),
    "serve": ("envelopay.node.serve", ["serve_worker"]),
    "config": ("envelopay.config", ["WorkerConfig", "load_config", "config_from_dict", "resolve_ref"]),
    "client": ("envelopay.client.buyer", ["ClientApp", "build", "pay_first", "follow", "check_address"]),
    "demo": ("envelopay.client.demo", ["run_demo", "Row"]),
    "live_conformance": ("envelopay.client.live_conformance", ["run_live"]),
}

# Names that moved to a room other than their module's main new home.
ELSEWHERE = {
    ("transport", "GardenTransport"): "envelopay.node.transports",
    ("transport", "SmtpTransport"): "envelopay.node.transports",
    ("operations", "kv_get"): "envelopay.endpoints.reference",
    ("operations", "KvGet"): "envelopay.endpoints.reference",
    ("responders", "reference_responder"): "envelopay.endpoints.reference",
}


def _import_fresh(name: str) -> tuple[object, list[warnings.WarningMessage]]:
    for cached in [m for m in sys.modules if m == name or m == "envelopay.agent"]:
        del sys.modules[cached]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(name)
    return module, caught


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_agent_module_resolves_its_names_and_warns(old: str) -> None:
    new_name, names = MOVED[old]
    module, caught = _import_fresh(f"envelopay.agent.{old}")
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert any(f"envelopay.agent.{old} is deprecated" in str(w.message) for w in deprecations)
    assert new_name in (module.__doc__ or "")
    new = importlib.import_module(new_name)
    for name in names:
        assert getattr(module, name) is getattr(new, name), name
        assert name in module.__all__  # type: ignore[attr-defined]


@pytest.mark.parametrize(("old", "name"), sorted(ELSEWHERE))
def test_names_that_moved_to_another_room_still_resolve(old: str, name: str) -> None:
    module, _ = _import_fresh(f"envelopay.agent.{old}")
    assert getattr(module, name) is getattr(importlib.import_module(ELSEWHERE[old, name]), name)


def test_the_agent_package_itself_warns() -> None:
    _, caught = _import_fresh("envelopay.agent")
    assert [
        w
        for w in caught
        if issubclass(w.category, DeprecationWarning) and "envelopay.agent" in str(w.message)
    ]


def test_a_config_naming_an_old_handler_path_still_loads() -> None:
    # Configs written by an earlier `envelopay init` name envelopay.agent.operations:…
    from envelopay.config import resolve_ref
    from envelopay.endpoints.reference import kv_get
    from envelopay.worker.operations import word_count

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert resolve_ref("envelopay.agent.operations:word_count") is word_count
        assert resolve_ref("envelopay.agent.operations:kv_get") is kv_get
