"""The agent SDK refuses, before it registers, an instance that would serve a capability in the other mode than
another agent's live instances; a registry it cannot read is no reason to stay down."""

from __future__ import annotations

import pytest

from reach.agent import modes
from reach.agent.modes import RegistrationRefused, check_modes
from reach.core.views.registryview import RegistryView
from reach.errors import InfraUnavailable
from reach.names import Names
from reach.records import CapabilityMode
from reach.settings import KafkaSettings
from tests.unit.routing_fixtures import reg

CAP = "demo.order.created"


def subscriber(instance_id: str, agent_id: str = "agent://demo/audit"):  # type: ignore[no-untyped-def]
    base = reg(instance_id, agent_id=agent_id, capability=CAP)
    return base.model_copy(update={"capabilities": [c.model_copy(update={"mode": CapabilityMode.SUBSCRIBE})
                                                    for c in base.capabilities]})


def registry_of(monkeypatch: pytest.MonkeyPatch, *registrations: object) -> None:
    view = RegistryView()
    for r in registrations:
        view.apply(r.instance_id, r)  # type: ignore[attr-defined]
    monkeypatch.setattr(modes, "read_registry", lambda *a, **k: view)


def test_a_subscriber_of_a_capability_another_agent_handles_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    registry_of(monkeypatch, reg("h1", agent_id="agent://demo/orders", capability=CAP))
    with pytest.raises(RegistrationRefused, match="served in one mode at a time"):
        check_modes(subscriber("a1"), kafka=KafkaSettings(bootstrap="memory://"), names=Names("ns"), now_ms=1_000)


def test_another_subscriber_or_instance_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    registry_of(monkeypatch, subscriber("a1"), subscriber("n1", "agent://demo/notify"))
    check_modes(subscriber("a2"), kafka=KafkaSettings(bootstrap="memory://"), names=Names("ns"), now_ms=1_000)


def test_an_unreadable_registry_is_logged_and_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*_a: object, **_k: object) -> RegistryView:
        raise InfraUnavailable("broker down")
    monkeypatch.setattr(modes, "read_registry", down)
    check_modes(subscriber("a1"), kafka=KafkaSettings(bootstrap="memory://"), names=Names("ns"), now_ms=1_000)


def test_a_registry_the_broker_refuses_to_read_is_passed_too(monkeypatch: pytest.MonkeyPatch) -> None:
    from confluent_kafka import KafkaError, KafkaException

    def denied(*_a: object, **_k: object) -> RegistryView:
        raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    monkeypatch.setattr(modes, "read_registry", denied)
    check_modes(subscriber("a1"), kafka=KafkaSettings(bootstrap="memory://"), names=Names("ns"), now_ms=1_000)
