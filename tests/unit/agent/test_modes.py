"""The agent SDK refuses, before it registers, an instance that would serve a capability in the other mode than
another agent's live instances; a registry it cannot read is no reason to stay down."""

from __future__ import annotations

import pytest

from reach.agent import modes
from reach.agent.modes import RegistrationRefused, check_registration
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import CapabilityMode
from reach.settings import KafkaSettings
from tests.unit.routing_fixtures import reg

CAP = "demo.order.created"
MEMORY = KafkaSettings(bootstrap="memory://")


def subscriber(instance_id: str, agent_id: str = "agent://demo/audit"):  # type: ignore[no-untyped-def]
    base = reg(instance_id, agent_id=agent_id, capability=CAP)
    return base.model_copy(update={"capabilities": [c.model_copy(update={"mode": CapabilityMode.SUBSCRIBE})
                                                    for c in base.capabilities]})


def registry_of(monkeypatch: pytest.MonkeyPatch, *registrations: object) -> None:
    view = RegistryView()
    for r in registrations:
        view.apply(r.instance_id, r)  # type: ignore[attr-defined]
    monkeypatch.setattr(modes, "read_registry", lambda *a, **k: view)


def test_a_subscriber_beside_a_handler_of_the_capability_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Decision 0076: subscribers beside a handler are notified observers, no longer refused (either way round)."""
    registry_of(monkeypatch, reg("h1", agent_id="agent://demo/orders", capability=CAP))
    check_registration(subscriber("a1"), kafka=MEMORY, names=Names("ns"), now_ms=1_000)
    registry_of(monkeypatch, subscriber("a1"))
    check_registration(reg("h1", agent_id="agent://demo/orders", capability=CAP), kafka=MEMORY, names=Names("ns"),
                       now_ms=1_000)


def test_another_subscriber_or_instance_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    registry_of(monkeypatch, subscriber("a1"), subscriber("n1", "agent://demo/notify"))
    check_registration(subscriber("a2"), kafka=MEMORY, names=Names("ns"), now_ms=1_000)


def test_an_unreadable_registry_is_logged_and_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*_a: object, **_k: object) -> RegistryView:
        raise InfraUnavailable("broker down")
    monkeypatch.setattr(modes, "read_registry", down)
    check_registration(subscriber("a1"), kafka=MEMORY, names=Names("ns"), now_ms=1_000)


def test_a_registry_the_broker_refuses_to_read_is_passed_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import KafkaError, KafkaException

    def denied(*_a: object, **_k: object) -> RegistryView:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    monkeypatch.setattr(modes, "read_registry", denied)
    check_registration(subscriber("a1"), kafka=MEMORY, names=Names("ns"), now_ms=1_000)


def test_a_changed_contract_under_a_live_version_is_refused_before_registering(
        monkeypatch: pytest.MonkeyPatch) -> None:
    live = reg("h1", agent_id="agent://demo/orders", capability=CAP)
    registry_of(monkeypatch, live)
    changed = reg("h2", agent_id="agent://demo/orders", capability=CAP)
    changed = changed.model_copy(update={"capabilities": [c.model_copy(update={"input_schema": '{"type":"string"}'})
                                                          for c in changed.capabilities]})
    with pytest.raises(RegistrationRefused, match="One version, one contract"):
        check_registration(changed, kafka=MEMORY, names=Names("ns"), now_ms=1_000)


def test_an_unknown_dependency_is_refused_and_a_known_one_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    registry_of(monkeypatch, reg("h1", agent_id="agent://demo/orders", capability=CAP))
    needs = reg("n1", agent_id="agent://demo/notify", capability="demo.notify")
    with pytest.raises(RegistrationRefused, match="demo.nowhere, which no agent serves"):
        check_registration(needs.model_copy(update={"depends_on": ["demo.nowhere"]}),
                           kafka=MEMORY, names=Names("ns"), now_ms=1_000)
    check_registration(needs.model_copy(update={"depends_on": [CAP]}), kafka=MEMORY, names=Names("ns"), now_ms=1_000)
