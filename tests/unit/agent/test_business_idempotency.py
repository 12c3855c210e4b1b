"""Business idempotency on the SDK fakes: one run per (tenant, capability, idempotency_key) while the first runs or
COMPLETED, the second's receipt names the first in `reused_from`; failures are not reused; tenants never share.
Also `ctx.cost` on the outcome receipt and the POLICY execution timeout cap."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from reach.agent import Agent, BusinessError
from reach.agent.agent import Context
from reach.agent.exceptions import InvalidCost
from reach.agent.idempotency import KeyScope
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import Pipeline, key_scope
from reach.agent.policy import execution_timeout_ms
from reach.envelopes import new_envelope
from reach.records import Envelope, Policy, Status
from tests.unit.agent.fakes import FakeLeases, FakeSender
from tests.unit.agent.test_pipeline import pipeline


class Counting:
    """A handler that counts its runs, optionally failing, sleeping or reporting a cost."""

    def __init__(self, *, fail: bool = False, sleep_s: float = 0.0, cost: float | None = None) -> None:
        self.runs = 0
        self.fail = fail
        self.sleep_s = sleep_s
        self.cost = cost

    async def __call__(self, payload: Any, ctx: Context) -> Any:
        self.runs += 1
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        if self.fail:
            raise BusinessError("NOPE", "refused for a reason that will not change")
        ctx.cost = self.cost
        return {"n": self.runs}


def agent_for(handler: Counting) -> Agent:
    agent = Agent("agent://test/idem", instance_id="i-1", lease_margin_ms=100)
    agent.capability("test.idem", version="1.0.0")(handler)
    return agent


def env(key: str | None, tenant: str = "t1", **fields: Any) -> Envelope:
    return new_envelope("test.idem", {"x": 1}, tenant=tenant, idempotency_key=key, **fields)


def run_all(pipe: Pipeline, *envelopes: Envelope) -> list[Outcome]:
    async def go() -> list[Outcome]:
        return [(await pipe.process(e, [])).outcome for e in envelopes]
    return asyncio.run(go())


def completed(sender: FakeSender) -> list[Any]:
    return [r for r in sender.receipts() if r.status is Status.COMPLETED]


def test_the_same_key_twice_runs_once_and_the_second_names_the_first() -> None:
    handler, sender = Counting(), FakeSender()
    pipe = pipeline(agent_for(handler), sender, FakeLeases())
    first, second = env("order-42"), env("order-42")
    assert run_all(pipe, first, second) == [Outcome.COMPLETE, Outcome.COMPLETE]
    assert handler.runs == 1
    ran, reused = completed(sender)
    assert ran.message_id == first.message_id and ran.reused_from is None
    assert reused.message_id == second.message_id and reused.reused_from == first.message_id
    assert reused.result == ran.result == b'{"n":1}'


def test_another_tenant_with_the_same_key_runs_on_its_own() -> None:
    handler, sender = Counting(), FakeSender()
    pipe = pipeline(agent_for(handler), sender, FakeLeases())
    run_all(pipe, env("order-42", tenant="t1"), env("order-42", tenant="t2"))
    assert handler.runs == 2
    assert [r.reused_from for r in completed(sender)] == [None, None]


def test_a_failed_first_is_not_reused_the_second_runs() -> None:
    handler, sender = Counting(fail=True), FakeSender()
    pipe = pipeline(agent_for(handler), sender, FakeLeases())
    first = env("order-42")
    assert run_all(pipe, first) == [Outcome.FAIL]
    handler.fail = False
    assert run_all(pipe, env("order-42")) == [Outcome.COMPLETE]
    assert handler.runs == 2 and completed(sender)[0].reused_from is None


def test_a_second_arriving_while_the_first_runs_waits_and_reuses_its_result() -> None:
    handler, sender = Counting(sleep_s=0.6), FakeSender()
    shared = FakeLeases("i-1")
    pipe_a = pipeline(agent_for(handler), sender, shared)
    pipe_b = pipeline(agent_for(handler), sender, FakeLeases("i-2", shared=shared))  # another instance
    first, second = env("order-42"), env("order-42")

    async def go() -> list[Outcome]:
        a = asyncio.create_task(pipe_a.process(first, []))
        await asyncio.sleep(0.1)  # the first holds the key now
        b = asyncio.create_task(pipe_b.process(second, []))
        return [(await a).outcome, (await b).outcome]

    assert asyncio.run(go()) == [Outcome.COMPLETE, Outcome.COMPLETE]
    assert handler.runs == 1
    assert completed(sender)[-1].reused_from == first.message_id


def test_a_key_still_running_after_the_wait_goes_to_the_retry_path() -> None:
    handler, sender, leases = Counting(), FakeSender(), FakeLeases()
    pipe = pipeline(agent_for(handler), sender, leases)
    second = env("order-42", execution_timeout_ms=300)
    scope = key_scope(second, None, lease_ms=1000, now=second.created_at)
    assert scope is not None
    leases.keys[scope.digest] = "01FIRSTSTILLRUNNING"  # another message holds the key and does not finish
    assert run_all(pipe, second) == [Outcome.RETRY]
    assert handler.runs == 0
    failed = [r for r in sender.receipts() if r.status is Status.ATTEMPT_FAILED]
    assert failed and failed[0].error and failed[0].error.code == "IDEMPOTENCY_KEY_BUSY"
    assert [r.status for r in sender.receipts()][-1] is Status.RETRY_SCHEDULED


def test_a_key_equal_to_the_message_id_is_left_to_the_message_lease() -> None:
    e = env(None)  # new_envelope defaults the key to the message_id
    assert e.idempotency_key == e.message_id
    assert key_scope(e, None, lease_ms=1000, now=e.created_at) is None


def test_the_window_and_hold_come_from_the_policy_and_the_deadline() -> None:
    e = env("k", budget_ms=120_000)
    scope = key_scope(e, Policy(idempotency_window_ms=60_000), lease_ms=5_000, now=e.created_at)
    assert scope == KeyScope(tenant="t1", capability="test.idem", key="k", window_ms=60_000, hold_ms=120_000)
    assert scope.digest != KeyScope(tenant="t2", capability="test.idem", key="k").digest


def test_a_reported_cost_lands_in_the_completed_receipt() -> None:
    handler, sender = Counting(cost=0.37), FakeSender()
    run_all(pipeline(agent_for(handler), sender, FakeLeases()), env(None))
    [done] = completed(sender)
    assert done.cost == pytest.approx(0.37)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "0.3", True])
def test_a_cost_that_is_not_a_finite_non_negative_number_is_refused(bad: Any) -> None:
    ctx = Context(envelope=env(None), agent_id="agent://a/b", instance_id="i")
    with pytest.raises(InvalidCost, match="finite number"):
        ctx.cost = bad


def test_the_policy_caps_the_execution_timeout_and_the_agent_default_fills_in() -> None:
    assert execution_timeout_ms(8_000, Policy(execution_timeout_ms=2_000), 30_000) == 2_000
    assert execution_timeout_ms(8_000, Policy(execution_timeout_ms=20_000), 30_000) == 8_000
    assert execution_timeout_ms(0, Policy(execution_timeout_ms=20_000), 30_000) == 20_000
    assert execution_timeout_ms(0, None, 30_000) == 30_000


def test_the_sdk_times_a_run_out_at_the_policy_execution_timeout() -> None:
    handler, sender = Counting(sleep_s=2.0), FakeSender()
    pipe = pipeline(agent_for(handler), sender, FakeLeases(), policy=Policy(execution_timeout_ms=200))
    assert run_all(pipe, env(None, execution_timeout_ms=8_000)) == [Outcome.FAIL]  # not idempotent: MAYBE_RAN
    [failed] = [r for r in sender.receipts() if r.status is Status.FAILED]
    assert failed.error and failed.error.code == "MAYBE_RAN"
    assert failed.error.message.startswith("EXECUTION_TIMEOUT") and "timeout of 200 ms" in failed.error.message
