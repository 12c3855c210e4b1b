"""Per-instance health gauges follow the published records and go with an instance's tombstone."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from reach.records import BreakerState, InstanceHealth
from reach.streams.health.gauges import HealthGauges


def test_gauges_follow_records_and_are_removed_with_the_instance() -> None:
    registry = CollectorRegistry()
    gauges = HealthGauges(registry)
    labels = {"instance_id": "i-1", "agent_id": "agent://demo/sick"}
    gauges.publish("i-1", InstanceHealth(instance_id="i-1", agent_id="agent://demo/sick", at=1,
                                         breaker=BreakerState.OPEN, admit=0.0, success_1m=0.25))
    assert registry.get_sample_value("agentreach_instance_breaker_state", labels) == 2.0
    assert registry.get_sample_value("agentreach_instance_success_rate", {**labels, "window": "1m"}) == 0.25
    assert registry.get_sample_value("agentreach_instance_success_rate", {**labels, "window": "5m"}) is None
    assert registry.get_sample_value("agentreach_instance_admit", labels) == 0.0
    gauges.publish("i-1", InstanceHealth(instance_id="i-1", agent_id="agent://demo/sick", at=2,
                                         breaker=BreakerState.HALF_OPEN, admit=0.1))
    assert registry.get_sample_value("agentreach_instance_breaker_state", labels) == 1.0
    assert registry.get_sample_value("agentreach_instance_success_rate", {**labels, "window": "1m"}) is None
    gauges.publish("i-1", None)
    assert registry.get_sample_value("agentreach_instance_breaker_state", labels) is None
    gauges.forget("never-seen")
