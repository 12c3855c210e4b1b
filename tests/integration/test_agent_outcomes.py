"""Handler outcomes become receipts: COMPLETED, no_data, FAILED with its code, ATTEMPT_FAILED, REJECTED."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from opentelemetry import trace
from ulid import ULID

from reach.agent import Agent, BusinessError, NoData, TransientError
from reach.client import Client
from reach.envelopes import now_ms
from reach.names import Names
from reach.records import Status, StepStatus
from reach.registry import read_registry
from reach.settings import KafkaSettings
from tests.integration.agent_support import Receipts, inbox_partitions, running, wait_for, with_starts


def _agent(calls: list[Any], trace_ids: list[int]) -> Agent:
    agent = Agent("agent://test/outcomes", ttl_ms=3000, max_concurrency=4, lease_margin_ms=500)

    @agent.capability("test.outcomes", version="1.2.0",
                      input_schema={"type": "object", "required": ["do"], "properties": {"do": {"type": "string"}}},
                      output_schema={"type": "object"})
    def handle(payload: dict[str, Any]) -> Any:
        calls.append(payload)
        trace_ids.append(trace.get_current_span().get_span_context().trace_id)
        match payload["do"]:
            case "echo":
                return payload
            case "nothing":
                return NoData
            case "refuse":
                raise BusinessError("CREDIT_LIMIT", "over the limit")
            case "flaky":
                raise TransientError("try later", retry_after=2)
            case "bad-output":
                return ["not", "an", "object"]
        raise AssertionError(payload)

    return agent


def test_outcomes_become_receipts(namespace: str) -> None:
    calls: list[Any] = []
    trace_ids: list[int] = []
    agent = _agent(calls, trace_ids)
    names = Names(namespace)
    inbox = names.inbox(agent.agent_id)
    with running(agent), Client() as client:
        wait_for(lambda: any(r.instance_id == agent.instance_id
                             for r in read_registry(KafkaSettings(), names).live(now_ms())), 30, "READY")
        receipts = Receipts(names.receipts)
        sent = {}
        for do in ("echo", "nothing", "refuse", "flaky", "bad-output"):
            env = client.envelope("test.outcomes", {"do": do, "n": 1}, version="^1.0")
            client.publish(env, topic=inbox)
            sent[do] = env
        invalid = client.envelope("test.outcomes", {"missing": "do"})
        wrong_version = client.envelope("test.outcomes", {"do": "echo"}, version="^2")
        for env in (invalid, wrong_version):
            client.publish(env, topic=inbox)
        terminal_or_attempt = [e.message_id for e in sent.values()] + [invalid.message_id, wrong_version.message_id]
        seen = wait_for(lambda: (lambda s: s if all(
            any(r.status.is_terminal or r.status is Status.ATTEMPT_FAILED for r in s.get(m, []))
            for m in terminal_or_attempt) else None)(receipts.by_message()), 30, "an outcome for every message")

    def last(env_id: str) -> Any:
        return [r for r in seen[env_id] if r.status is not Status.STARTED][-1]

    echo = last(sent["echo"].message_id)
    assert echo.status is Status.COMPLETED and echo.step_status is StepStatus.OK
    assert json.loads(echo.result) == {"do": "echo", "n": 1}
    assert echo.agent_id == agent.agent_id and echo.instance_id == agent.instance_id
    assert echo.trace_id == sent["echo"].trace_id
    assert with_starts(seen[sent["echo"].message_id]) == [Status.STARTED, Status.COMPLETED]
    nothing = last(sent["nothing"].message_id)
    assert (nothing.status, nothing.step_status, nothing.result) == (Status.COMPLETED, StepStatus.NO_DATA, None)
    refuse = last(sent["refuse"].message_id)
    assert refuse.status is Status.FAILED and refuse.error.kind == "BUSINESS" and refuse.error.code == "CREDIT_LIMIT"
    flaky = next(r for r in seen[sent["flaky"].message_id] if r.status is Status.ATTEMPT_FAILED)
    assert flaky.error.kind == "TRANSIENT" and flaky.retry_after_ms == 2000
    bad_output = last(sent["bad-output"].message_id)
    assert bad_output.status is Status.FAILED and bad_output.error.code == "OUTPUT_SCHEMA"
    # Invalid input and an unserved version are REJECTED without calling the handler.
    for env, code in ((invalid, "INPUT_SCHEMA"), (wrong_version, "NO_MATCHING_CAPABILITY")):
        assert [r.status for r in seen[env.message_id]] == [Status.REJECTED]
        assert seen[env.message_id][0].error.kind == "INVALID_INPUT" and seen[env.message_id][0].error.code == code
    assert sorted(c["do"] for c in calls) == sorted(sent)
    # The handler ran inside the caller's trace: W3C trace id == the envelope's trace_id (a ULID).
    assert sorted(trace_ids) == sorted(int(ULID.from_str(e.trace_id)) for e in sent.values())
    # After a clean stop the instance is gone from the registry (tombstone).
    view = read_registry(KafkaSettings(), names)
    assert all(i.registration.instance_id != agent.instance_id for i in view.instances(now_ms()))


def test_at_most_max_concurrency_handlers_run(namespace: str) -> None:
    agent = Agent("agent://test/limit", ttl_ms=3000, max_concurrency=2)
    running_now = [0]
    peak = [0]

    @agent.capability("test.limit", version="1.0.0")
    async def slow(payload: Any) -> Any:
        running_now[0] += 1
        peak[0] = max(peak[0], running_now[0])
        await asyncio.sleep(0.2)
        running_now[0] -= 1
        return payload

    names = Names(namespace)
    with running(agent), Client() as client:
        wait_for(lambda: read_registry(KafkaSettings(), names).live(now_ms()), 30, "READY")
        receipts = Receipts(names.receipts)
        envs = [client.envelope("test.limit", {"i": i}) for i in range(8)]
        for i, env in enumerate(envs):
            client.publish(env, topic=names.inbox(agent.agent_id), partition=i % inbox_partitions(agent.agent_id))
        receipts.wait_status([e.message_id for e in envs], Status.COMPLETED)
    assert peak[0] == 2
