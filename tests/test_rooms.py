"""The rooms' public names (docs/DESIGN.md): each lives in one room, and a config written by
an earlier `envelopay init` still loads its handlers though their first package is gone."""

from __future__ import annotations

import importlib

import pytest

from envelopay.config import resolve_ref
from envelopay.errors import ConfigError

# room → names users import from it
ROOMS = {
    "envelopay.engine": ["Engine", "BaseApplication", "Context", "Notice", "Outcome", "Refuse", "Sent"],
    "envelopay.engine.outbox": ["OutboxDrainer", "DirectHook", "EnforcerHook"],
    "envelopay.dkim": ["DkimSigner", "Signer", "dkim_signer", "sign", "verify"],
    "envelopay.mail.transport": ["Transport", "DeliveryRefused", "Envelope", "EnvelopeOpener"],
    "envelopay.mail.transport.garden": ["GardenTransport", "GardenPool", "GardenEnvelope"],
    "envelopay.mail.transport.smtp": ["SmtpConfig", "send_raw"],
    "envelopay.mail.transport.submission": ["SmtpTransport", "SmtpEnvelope"],
    "envelopay.mail.transport.mock": ["MockTransport"],
    "envelopay.testing": ["MockTransport"],
    "envelopay.worker.app": ["WorkerApp", "WorkerApplication"],
    "envelopay.worker.tasks": ["TaskBook", "TaskError", "TaskRequest"],
    "envelopay.worker.operations": ["word_count", "WordCount", "digest", "Digest"],
    "envelopay.worker.counterpay": ["CounterPayments"],
    "envelopay.endpoints.toolmail": ["build_tool_mail", "read_tool_mail"],
    "envelopay.endpoints.responders": ["Responder", "ResponderError"],
    "envelopay.endpoints.reference": ["kv_get", "KvGet", "reference_responder"],
    "envelopay.endpoints.calls": ["CallClient", "LedgerCalls"],
    "envelopay.node.agent_node": ["AgentNode", "build_node", "open_store", "garden_transport"],
    "envelopay.node.runtime": ["pump", "serve_responders", "serve_call_replies"],
    "envelopay.node.keys": ["generate_keys", "GeneratedKeys"],
    "envelopay.node.init": ["init_agent", "InitResult"],
    "envelopay.node.serve": ["serve_worker"],
    "envelopay.config": ["WorkerConfig", "load_config", "config_from_dict", "resolve_ref"],
    "envelopay.client.buyer": ["ClientApp", "build", "pay_first", "follow", "check_address"],
    "envelopay.client.demo": ["run_demo", "Row"],
    "envelopay.client.live_conformance": ["run_live"],
}


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_offers_its_names(room: str) -> None:
    module = importlib.import_module(room)
    for name in ROOMS[room]:
        assert hasattr(module, name), f"{room}.{name}"


def test_the_deprecated_agent_package_is_gone() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("envelopay.agent")


def test_a_config_naming_an_old_handler_path_still_loads() -> None:
    # Configs written by an earlier `envelopay init` name envelopay.agent.operations:…
    from envelopay.endpoints.reference import kv_get
    from envelopay.worker.operations import word_count

    assert resolve_ref("envelopay.agent.operations:word_count") is word_count
    assert resolve_ref("envelopay.agent.operations:kv_get") is kv_get
    with pytest.raises(ConfigError):  # only the handlers that lived there, nothing else of it
        resolve_ref("envelopay.agent.node:AgentNode")
