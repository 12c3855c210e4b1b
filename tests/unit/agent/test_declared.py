"""What a capability declares, applied by the SDK on its in-memory seams (reach.agent.declared, decision 0075): a
request checked against a contract this instance does not serve is REJECTED unrun; an attempt cut by its timer
is retried only when the capability declares `idempotent`, else it ends FAILED MAYBE_RAN with the attempt's
evidence; two requests with the same payload and no key to an idempotent capability run once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from reach.agent import Context
from reach.agent.outcomes import Outcome
from reach.records import Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import agent_with, envelope, pipeline, run, statuses


class Slow:
    """A handler that counts its runs, reports progress once, and takes `sleep_s`."""

    def __init__(self, sleep_s: float = 0.0) -> None:
        self.runs = 0
        self.sleep_s = sleep_s

    async def __call__(self, payload: Any, ctx: Context) -> Any:
        self.runs += 1
        await ctx.progress(0.5, "half way")
        await asyncio.sleep(self.sleep_s)
        return {"n": self.runs}


@pytest.mark.parametrize(("schema_version", "ran"), [(None, True), ("1.0.0", True), ("0.9.0", False),
                                                      ("1.1.0", False), ("2.0.0", False), ("x.y", False)])
def test_a_request_checked_against_a_contract_this_instance_does_not_serve_is_rejected_unrun(
        schema_version: str | None, ran: bool) -> None:
    handler, sender = Slow(), FakeSender()
    pipe = pipeline(agent_with(handler), sender, FakeLeases())  # serves test.unit 1.0.0
    outcome = run(pipe, envelope(schema_version=schema_version))
    assert (outcome is Outcome.COMPLETE) is ran and handler.runs == int(ran)
    if not ran:
        [receipt] = sender.receipts()
        assert receipt.status is Status.REJECTED and receipt.error and receipt.error.code == "SCHEMA_VERSION_MISMATCH"
        assert f"{schema_version!r}" in receipt.error.message or f"contract {schema_version}" in receipt.error.message


def test_a_cut_run_of_a_capability_not_declared_idempotent_ends_maybe_ran_with_its_evidence() -> None:
    handler, sender = Slow(sleep_s=2.0), FakeSender()
    pipe = pipeline(agent_with(handler, execution_timeout_ms=200), sender, FakeLeases())
    before = int(time.time() * 1000)
    assert run(pipe, envelope()) is Outcome.FAIL
    assert handler.runs == 1 and sender.on("ns.retry.1s") == [], "never retried"
    ending = sender.receipts()[-1]
    assert ending.status is Status.FAILED and ending.error and ending.error.code == "MAYBE_RAN"
    assert ending.instance_id == "i-1" and "on i-1" in ending.error.message
    assert "does not declare idempotent" in ending.error.message and "EXECUTION_TIMEOUT" in ending.error.message
    assert "receipts sent: STARTED, 1 PROGRESS" in ending.error.message
    seen = ending.timings
    assert before <= seen["maybe_ran_started_at"] <= ending.at
    assert seen["maybe_ran_run_ms"] >= 200 and seen["maybe_ran_started_receipt"] == 1
    assert seen["maybe_ran_progress"] == 1 and seen["maybe_ran_children"] == 0
    assert Status.STARTED in statuses(sender)


def test_a_cut_run_of_an_idempotent_capability_is_retried() -> None:
    handler, sender = Slow(sleep_s=2.0), FakeSender()
    pipe = pipeline(agent_with(handler, execution_timeout_ms=200, idempotent=True), sender, FakeLeases())
    assert run(pipe, envelope()) is Outcome.RETRY
    assert [r.status for r in sender.receipts()][-2:] == [Status.ATTEMPT_FAILED, Status.RETRY_SCHEDULED]
    assert sender.receipts()[-2].error.code == "EXECUTION_TIMEOUT"  # type: ignore[union-attr]
    assert len(sender.on("ns.retry.1s")) == 1


def test_a_failure_that_is_not_a_cut_is_retried_as_before() -> None:
    def flaky(_payload: Any) -> Any:
        raise ConnectionError("down")

    sender = FakeSender()
    assert run(pipeline(agent_with(flaky), sender, FakeLeases()), envelope()) is Outcome.RETRY


def test_the_same_payload_without_a_key_runs_once_on_an_idempotent_capability_only() -> None:
    for idempotent, runs in ((True, 1), (False, 2)):
        handler, sender = Slow(), FakeSender()
        pipe = pipeline(agent_with(handler, idempotent=idempotent), sender, FakeLeases())
        first, second = envelope({"a": 1, "b": 2}), envelope({"b": 2, "a": 1})
        assert first.idempotency_key == first.message_id, "the caller sent no key"
        assert [run(pipe, first), run(pipe, second)] == [Outcome.COMPLETE, Outcome.COMPLETE]
        assert handler.runs == runs
        done = [r for r in sender.receipts() if r.status is Status.COMPLETED]
        assert done[-1].reused_from == (first.message_id if idempotent else None)
    other, sender = Slow(), FakeSender()
    pipe = pipeline(agent_with(other, idempotent=True), sender, FakeLeases())
    run(pipe, envelope({"a": 1}))
    run(pipe, envelope({"a": 2}))
    run(pipe, envelope({"a": 1}, idempotency_key="caller-key"))  # a caller's own key: its own dedupe
    assert other.runs == 3
