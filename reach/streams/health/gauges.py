"""Prometheus gauges per instance from the health writer's records: breaker state, success rates, admit, weight."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from reach.core.healthmodel.fields import BREAKER_VALUE
from reach.records import InstanceHealth


class HealthGauges:
    """Set on every published record of an owned instance; an instance's series go with its tombstone or owner."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["instance_id", "agent_id"]
        self.breaker = Gauge("agentreach_instance_breaker_state", "Breaker state: 0 CLOSED, 1 HALF_OPEN, 2 OPEN",
                             labels, registry=registry)
        self.success = Gauge("agentreach_instance_success_rate", "Share of calls that succeeded, by window",
                             [*labels, "window"], registry=registry)
        self.admit = Gauge("agentreach_instance_admit", "Share of the instance's traffic admitted", labels,
                           registry=registry)
        self.weight = Gauge("agentreach_instance_weight", "Health weight (0: picked only when nothing else is)",
                            labels, registry=registry)
        self._agents: dict[str, str] = {}

    def publish(self, instance_id: str, record: InstanceHealth | None) -> None:
        if record is None:
            self.forget(instance_id)
            return
        agent = self._agents.get(instance_id)
        if agent is not None and agent != record.agent_id:
            self.forget(instance_id)
        self._agents[instance_id] = record.agent_id
        labels = (instance_id, record.agent_id)
        self.breaker.labels(*labels).set(BREAKER_VALUE.get(record.breaker.value, 0))
        self.admit.labels(*labels).set(record.admit)
        self.weight.labels(*labels).set(record.weight)
        for window, value in (("1m", record.success_1m), ("5m", record.success_5m)):
            if value is None:
                self._remove(self.success, instance_id, record.agent_id, window)
            else:
                self.success.labels(*labels, window).set(value)

    def forget(self, instance_id: str) -> None:
        agent = self._agents.pop(instance_id, None)
        if agent is None:
            return
        for gauge in (self.breaker, self.admit, self.weight):
            self._remove(gauge, instance_id, agent)
        for window in ("1m", "5m"):
            self._remove(self.success, instance_id, agent, window)

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        try:
            gauge.remove(*labels)
        except KeyError:
            pass
