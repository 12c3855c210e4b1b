"""The agent's own Prometheus metrics (opt-in port): outcomes, handler time, in-flight work, reported usage."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from reach.agent.middleware import Finished, Middleware
from reach.records import Usage

MAX_MODELS = 20
OTHER_MODEL = "other"
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class AgentMetrics(Middleware):
    """Observes every finished message; served on `port` when one is given."""

    def __init__(self, *, agent_id: str, port: int | None) -> None:
        self.registry = CollectorRegistry()
        self._agent_id = agent_id
        self.handled = Counter("agentreach_agent_messages_total", "Messages finished by this instance, by outcome",
                               ["agent_id", "capability", "outcome"], registry=self.registry)
        self.handler = Histogram("agentreach_agent_handler_seconds", "Handler run time",
                                 ["agent_id", "capability"], buckets=_BUCKETS, registry=self.registry)
        self.inflight = Gauge("agentreach_agent_inflight", "Handlers running now", ["agent_id"],
                              registry=self.registry)
        # usage (ctx.usage): capabilities are this agent's own; models from a bounded set (MAX_MODELS, then `other`)
        self.tokens = Counter("agentreach_agent_usage_tokens_total", "Tokens handlers reported, by direction",
                              ["agent_id", "capability", "model", "direction"], registry=self.registry)
        self.cost = Counter("agentreach_agent_usage_cost_micros_total", "Cost handlers reported, in micro-units of "
                            "REACH_CURRENCY", ["agent_id", "capability", "model"], registry=self.registry)
        self._models: set[str] = set()
        # labelled children looked up once, not per message (a label lookup costs more than the increment)
        self._inflight = self.inflight.labels(agent_id)
        self._handled: dict[tuple[str, str], Any] = {}
        self._handler: dict[str, Any] = {}
        if port is not None:
            start_http_server(port, addr="127.0.0.1", registry=self.registry)

    async def after_outcome(self, finished: Finished) -> None:
        capability, outcome = finished.envelope.capability, finished.verdict.outcome.value
        counter = self._handled.get((capability, outcome))
        if counter is None:
            counter = self._handled[capability, outcome] = self.handled.labels(self._agent_id, capability, outcome)
        counter.inc()
        if finished.run_ms is not None:
            timer = self._handler.get(capability)
            if timer is None:
                timer = self._handler[capability] = self.handler.labels(self._agent_id, capability)
            timer.observe(finished.run_ms / 1000)

        if finished.usage is not None:
            self._count_usage(capability, finished.usage)

    def _count_usage(self, capability: str, usage: Usage) -> None:
        model = self.model_label(usage.model)
        self.tokens.labels(self._agent_id, capability, model, "input").inc(usage.input_tokens)
        self.tokens.labels(self._agent_id, capability, model, "output").inc(usage.output_tokens)
        if usage.cost_micros:
            self.cost.labels(self._agent_id, capability, model).inc(usage.cost_micros)

    def model_label(self, model: str | None) -> str:
        """The model's own label while fewer than MAX_MODELS were seen; `other` after, `none` when not reported
        (a handler names models; a bug naming one per request must not grow the registry without bound)."""
        if model is None:
            return "none"
        if model not in self._models:
            if len(self._models) >= MAX_MODELS:
                return OTHER_MODEL
            self._models.add(model)
        return model

    def set_inflight(self, count: int) -> None:
        self._inflight.set(count)
