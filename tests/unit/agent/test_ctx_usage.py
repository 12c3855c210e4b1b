"""ctx.usage and returned usage through the pipeline: on the terminal receipt, in the agent's metrics, on the
invoke_agent span; bad values dropped with a warning and the request still completes."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from reach import tracing
from reach.agent import Agent, BusinessError, TransientError
from reach.agent.agent import Context
from reach.agent.metrics import MAX_MODELS, AgentMetrics
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import Pipeline
from reach.records import Status, Usage
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import NAMES, agent_with, envelope


def pipeline(agent: Agent, sender: FakeSender, metrics: AgentMetrics | None = None) -> Pipeline:
    from concurrent.futures import ThreadPoolExecutor

    return Pipeline(agent, publisher=sender, leases=FakeLeases(), receipts_topic=NAMES.receipts,
                    executor=ThreadPoolExecutor(2), middleware=[metrics] if metrics else [], currency="EUR")


def final(handler: Any, metrics: AgentMetrics | None = None) -> tuple[Outcome | None, Usage | None]:
    sender = FakeSender()
    processed = asyncio.run(pipeline(agent_with(handler), sender, metrics).process(
        envelope().model_copy(update={"source": "gateway:app_9"}), []))
    last = sender.receipts()[-1]
    return processed.outcome, last.usage


def test_reported_usage_adds_up_on_the_terminal_receipt() -> None:
    async def handler(payload: Any, ctx: Context) -> dict[str, str]:
        ctx.usage(input_tokens=100, output_tokens=50, model="small", cost=1_200)
        ctx.usage(input_tokens=10, model="large", cost=300)
        return {"ok": "yes"}

    outcome, used = final(handler)
    assert outcome is Outcome.COMPLETE
    assert used == Usage(input_tokens=110, output_tokens=50, model="large", cost_micros=1_500, currency="EUR",
                         source="gateway:app_9")


def test_usage_is_taken_from_the_returned_value_when_none_was_reported() -> None:
    outcome, used = final(lambda p: {"text": "hi", "model": "m1", "usage": {"prompt_tokens": 7,
                                                                          "completion_tokens": 3}})
    assert outcome is Outcome.COMPLETE and used is not None
    assert (used.input_tokens, used.output_tokens, used.model, used.cost_micros) == (7, 3, "m1", None)


def test_bad_usage_is_dropped_with_a_warning_and_never_fails_the_request(caplog: pytest.LogCaptureFixture) -> None:
    def handler(payload: Any, ctx: Context) -> dict[str, int]:
        ctx.usage(input_tokens=-1, output_tokens=float("nan"), cost=float("inf"))
        ctx.usage(input_tokens=10**12, output_tokens=4)
        return {"n": 1}

    with caplog.at_level(logging.WARNING, logger="reach.agent"):
        outcome, used = final(handler)
    assert outcome is Outcome.COMPLETE
    assert used is not None and (used.input_tokens, used.output_tokens, used.cost_micros) == (0, 4, None)
    assert sum("dropped" in r.message for r in caplog.records) == 4


def test_a_handler_that_fails_still_reports_what_it_spent_and_a_retry_carries_none() -> None:
    def failing(payload: Any, ctx: Context) -> None:
        ctx.usage(input_tokens=5)
        raise BusinessError("NO", "business says no")

    outcome, used = final(failing)
    assert outcome is Outcome.FAIL and used is not None and used.input_tokens == 5

    def flaky(payload: Any, ctx: Context) -> None:
        ctx.usage(input_tokens=5)
        raise TransientError("again")

    sender = FakeSender()
    asyncio.run(pipeline(agent_with(flaky), sender).process(envelope(), []))
    [attempt] = [r for r in sender.receipts() if r.status is Status.ATTEMPT_FAILED]
    assert attempt.usage is None  # only the terminal receipt carries usage: it is counted once per generation


def test_metrics_count_tokens_and_cost_by_capability_and_a_bounded_model_set() -> None:
    metrics = AgentMetrics(agent_id="agent://test/unit", port=None)

    async def handler(payload: Any, ctx: Context) -> dict[str, int]:
        ctx.usage(input_tokens=100, output_tokens=50, model="small", cost=2_000)
        return {"n": 1}

    final(handler, metrics)
    final(handler, metrics)
    sample = metrics.registry.get_sample_value
    labels = {"agent_id": "agent://test/unit", "capability": "test.unit", "model": "small"}
    assert sample("agentreach_agent_usage_tokens_total", {**labels, "direction": "input"}) == 200
    assert sample("agentreach_agent_usage_tokens_total", {**labels, "direction": "output"}) == 100
    assert sample("agentreach_agent_usage_cost_micros_total", labels) == 4_000
    for n in range(MAX_MODELS + 5):
        metrics.model_label(f"model-{n}")
    assert metrics.model_label("one-too-many") == "other" and metrics.model_label(None) == "none"


def test_the_run_is_an_invoke_agent_span_with_gen_ai_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "tracer", lambda: provider.get_tracer("reach"))

    async def handler(payload: Any, ctx: Context) -> dict[str, int]:
        ctx.usage(input_tokens=100, output_tokens=50, model="small")
        return {"n": 1}

    final(handler)
    [span] = [s for s in exporter.get_finished_spans() if s.name == "invoke_agent agent://test/unit"]
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "invoke_agent" and attrs["gen_ai.agent.id"] == "agent://test/unit"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"],
            attrs["gen_ai.request.model"]) == (100, 50, "small")
    consumer = next(s for s in exporter.get_finished_spans() if s.name.startswith("reach.handle"))
    assert span.parent is not None and span.parent.span_id == consumer.context.span_id
