"""The pipeline's failure paths on in-memory seams: bad payloads, oversize results, cancellation, timeouts,
cached retries and an unreachable Redis."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reach.agent import Agent, TransientError
from reach.agent.agent import Context
from reach.agent.ending import Unfenced
from reach.agent.exceptions import RecordRefused
from reach.agent.outage import Outage
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import MAX_RECEIPT_BYTES, Pipeline
from reach.agent.retrying import RetryStep
from reach.agent.statuscheck import AlreadyCompleted
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import Envelope, ErrorInfo, Policy, RoutingHints, Status
from tests.unit.agent.fakes import FakeLeases, FakeSender

NAMES = Names("ns")


def agent_with(handler: Callable[..., Any], *, idempotent: bool = False, **kwargs: Any) -> Agent:
    agent = Agent("agent://test/unit", instance_id="i-1", lease_margin_ms=100, **kwargs)
    agent.capability("test.unit", version="1.0.0", input_schema={"type": "object"}, idempotent=idempotent)(handler)
    return agent


class Clock:
    """Monotonic seconds that move only when a test says so (the Redis backoff's clock)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pipeline(agent: Agent, sender: FakeSender, leases: FakeLeases, *,
             completed: Callable[[str, int], Any] | None = None, clock: Clock | None = None,
             policy: Policy | None = None, **durable: Any) -> Pipeline:
    """A pipeline and its RetryStep sharing one Redis outage (1 s backoff on `clock`) and one backlog of unfenced
    endings, as the runner wires them."""
    outage = Outage(base_s=1.0, max_s=1.0, clock=clock or Clock())
    durable.setdefault("unfenced", Unfenced())
    retry = RetryStep(agent_id=agent.agent_id, instance_id=agent.instance_id, publisher=sender, names=NAMES,
                      tiers=["1s", "10s"], leases=leases, redis_outage=outage, unfenced=durable["unfenced"])

    async def unknown(_m: str, _g: int) -> AlreadyCompleted | None:
        return None

    return Pipeline(agent, publisher=sender, leases=leases, receipts_topic=NAMES.receipts,
                    executor=ThreadPoolExecutor(2), middleware=[retry], completed=completed or unknown,
                    redis_outage=outage, policy=lambda _cap: policy, **durable)


def envelope(json_value: Any = None, **update: Any) -> Envelope:
    """A JSON envelope; `payload=` in `update` replaces its bytes as they are."""
    return new_envelope("test.unit", json_value if json_value is not None else {"x": 1}).model_copy(update=update)


def run(pipe: Pipeline, env: Envelope) -> Outcome:
    return asyncio.run(pipe.process(env, [])).outcome


def statuses(sender: FakeSender) -> list[Status]:
    return [r.status for r in sender.receipts()]


def test_a_payload_nested_deeper_than_the_parser_allows_is_rejected_not_fatal() -> None:
    calls: list[Any] = []
    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(lambda p: calls.append(p) or p), sender, leases)
    deep = envelope(payload=b"[" * 100_000)
    assert deep.content_type.startswith("application/json")
    assert run(pipe, deep) is Outcome.REJECT
    [receipt] = sender.receipts()
    assert receipt.status is Status.REJECTED and receipt.error and receipt.error.code == "INVALID_JSON"
    assert "nested too deeply" in receipt.error.message and calls == []
    assert run(pipe, envelope()) is Outcome.COMPLETE


def test_a_result_too_large_for_a_receipt_fails_with_result_too_large_and_that_is_what_is_cached() -> None:
    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(lambda p: {"blob": "x" * (MAX_RECEIPT_BYTES + 10)}), sender, leases)
    env = envelope()
    assert run(pipe, env) is Outcome.FAIL
    final = sender.receipts()[-1]
    assert final.status is Status.FAILED and final.error and final.error.code == "RESULT_TOO_LARGE"
    assert final.result is None
    cached = leases.results[env.message_id, env.generation]
    assert len(cached) < 10_000
    # a redelivery republishes the small FAILED receipt instead of crashing again
    assert run(pipe, env) is Outcome.FAIL
    assert sender.receipts()[-1].error.code == "RESULT_TOO_LARGE"  # type: ignore[union-attr]


def test_a_receipt_the_broker_refuses_is_handed_back_as_a_failed_ack_not_raised() -> None:
    def refuse(topic: str, value: bytes | None) -> BaseException | None:
        big = value is not None and b"huge-result" in value
        return RecordRefused(f"{topic}: MSG_SIZE_TOO_LARGE") if big else None

    sender, leases = FakeSender(refuse), FakeLeases()
    pipe = pipeline(agent_with(lambda p: {"r": "huge-result"}), sender, leases)
    processed = asyncio.run(pipe.process(envelope(), []))
    assert processed.outcome is Outcome.COMPLETE
    # the runner commits only after every returned ack succeeded; a refused one isolates the record there
    assert isinstance(processed.acks[-1].exception(), RecordRefused)


def test_a_handler_raising_cancelled_error_is_a_retryable_failure_with_its_retry_scheduled() -> None:
    async def cancels(_payload: Any) -> Any:
        raise asyncio.CancelledError()

    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(cancels), sender, leases)
    assert run(pipe, envelope()) is Outcome.RETRY
    assert statuses(sender) == [Status.STARTED, Status.ATTEMPT_FAILED, Status.RETRY_SCHEDULED]
    assert sender.receipts()[1].error.code == "CANCELLED"  # type: ignore[union-attr]
    assert len(sender.on("ns.retry.1s")) == 1
    assert leases.leases == {}, "the lease is released after the retry is published"


def test_a_sync_handler_past_its_timeout_keeps_its_capacity_and_lease_until_its_thread_exits() -> None:
    release = threading.Event()

    def stuck(_payload: Any) -> Any:
        release.wait(10)
        return {}

    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(stuck, idempotent=True), sender, leases)  # a cut run is retried: idempotent
    env = envelope(execution_timeout_ms=50)

    async def scenario() -> tuple[Outcome, int, bool, int, bool]:
        outcome = (await pipe.process(env, [])).outcome
        during, held = pipe.lingering, (env.message_id, 0) in leases.leases
        release.set()
        for _ in range(200):
            if pipe.lingering == 0 and not leases.leases:
                break
            await asyncio.sleep(0.01)
        return outcome, during, held, pipe.lingering, (env.message_id, 0) in leases.leases

    outcome, during, held, after, held_after = asyncio.run(scenario())
    assert outcome is Outcome.RETRY and sender.receipts()[1].error.code == "EXECUTION_TIMEOUT"  # type: ignore[union-attr]
    assert (during, held) == (1, True)
    assert (after, held_after) == (0, False)


def test_a_redelivered_failed_attempt_republishes_its_retry_instead_of_rerunning() -> None:
    runs: list[int] = []

    def flaky(_payload: Any) -> Any:
        runs.append(1)
        raise TransientError("down")

    sender, leases = FakeSender(), FakeLeases()
    pipe = pipeline(agent_with(flaky), sender, leases)
    env = envelope()
    assert run(pipe, env) is Outcome.RETRY
    [first] = sender.on("ns.retry.1s")
    assert run(pipe, env) is Outcome.RETRY
    assert runs == [1], "the handler ran once"
    assert sender.on("ns.retry.1s") == [first, first], "the same retry (same due time), not a second decision"
    assert statuses(sender)[-1] is Status.RETRY_SCHEDULED


def test_with_redis_down_the_status_table_decides_and_otherwise_the_handler_runs() -> None:
    runs: list[str] = []
    sender, leases = FakeSender(), FakeLeases()
    leases.down = True
    done_ids: set[str] = set()

    async def completed(message_id: str, _generation: int) -> AlreadyCompleted | None:
        return AlreadyCompleted(b'{"x":"old"}') if message_id in done_ids else None

    clock = Clock()
    # a grace no loaded machine outlasts: the run below is within it, so no STARTED (the default 50 ms flaked)
    pipe = pipeline(agent_with(lambda p: runs.append(p["x"]) or p, started_grace_ms=60_000), sender, leases,
                    completed=completed, clock=clock)
    fresh, old = envelope({"x": "fresh"}), envelope({"x": "old"})
    done_ids.add(old.message_id)
    assert run(pipe, fresh) is Outcome.COMPLETE
    clock.now += 1.0  # past the backoff, so Redis is tried (and fails) again
    assert run(pipe, old) is Outcome.COMPLETE
    assert runs == ["fresh"], "the COMPLETED one was not run again"
    assert statuses(sender) == [Status.COMPLETED, Status.COMPLETED]  # a run within the grace: no STARTED
    again = sender.receipts()[-1]
    assert (again.message_id, again.result, again.timings) == (old.message_id, b'{"x":"old"}', {"status_hit": 1})
    leases.down = False
    clock.now += 1.0  # past the backoff (capped at 1 s)
    assert run(pipe, envelope({"x": "after"})) is Outcome.COMPLETE
    assert runs == ["fresh", "after"] and leases.results, "back on Redis: results cached again"


def test_while_redis_is_backed_off_a_retry_is_published_without_trying_to_cache_it() -> None:
    def flaky(_payload: Any) -> Any:
        raise TransientError("down")

    sender, leases = FakeSender(), FakeLeases()
    leases.down = True
    clock = Clock()
    pipe = pipeline(agent_with(flaky), sender, leases, clock=clock)
    assert run(pipe, envelope()) is Outcome.RETRY
    assert leases.calls == 1, "only the claim asked Redis; the retry cache shares its backoff, no socket timeout"
    assert len(sender.on("ns.retry.1s")) == 1 and statuses(sender)[-1] is Status.RETRY_SCHEDULED
    leases.down = False
    clock.now += 1.0
    env = envelope()
    assert run(pipe, env) is Outcome.RETRY
    assert (env.message_id, env.generation, env.attempt) in leases.retries, "Redis back: the retry is cached"


def test_a_redis_error_in_the_renewer_does_not_end_renewal() -> None:
    gate = threading.Event()

    def slow(_payload: Any) -> Any:
        gate.wait(5)
        return {}

    sender, leases = FakeSender(), FakeLeases()
    agent = agent_with(slow)
    clock = Clock()
    pipe = pipeline(agent, sender, leases, clock=clock)

    async def until(check: Callable[[], bool]) -> None:
        for _ in range(1000):
            if check():
                return
            await asyncio.sleep(0.01)
        raise AssertionError("condition not reached")

    async def scenario() -> Outcome:
        work = asyncio.create_task(pipe.process(envelope(execution_timeout_ms=3_000), []))
        await until(lambda: bool(leases.leases))
        leases.down = True
        failed_at = leases.calls
        await until(lambda: leases.calls > failed_at)  # a renewal hit the outage
        leases.down = False
        clock.now += 1.0  # past the backoff
        back_at = leases.calls
        await until(lambda: leases.calls > back_at)  # and renewal went on afterwards
        gate.set()
        return (await work).outcome
    assert asyncio.run(scenario()) is Outcome.COMPLETE


def test_a_delivery_older_than_the_result_cache_asks_the_status_table_before_running() -> None:
    """The register lives RESULT_TTL_S after the ending (reach.core.retention): a delivery created longer ago than
    that finds no cached result even when the message completed, so the status table decides; a recent delivery
    never asks it (one Redis round trip, no HTTP)."""
    from reach.envelopes import now_ms

    runs: list[str] = []
    asked: list[str] = []
    sender, leases = FakeSender(), FakeLeases()
    done_ids: set[str] = set()

    async def completed(message_id: str, _generation: int) -> AlreadyCompleted | None:
        asked.append(message_id)
        return AlreadyCompleted(b'{"x":"old"}') if message_id in done_ids else None

    agent = agent_with(lambda p: runs.append(p["x"]) or p, result_ttl_s=1800)
    pipe = pipeline(agent, sender, leases, completed=completed)
    long_ago = now_ms() - 1800 * 1000
    old_done = envelope({"x": "old-done"}, created_at=long_ago)
    old_new = envelope({"x": "old-never-ran"}, created_at=long_ago)
    recent = envelope({"x": "recent"})
    done_ids.add(old_done.message_id)
    assert run(pipe, old_done) is Outcome.COMPLETE
    assert runs == [] and asked == [old_done.message_id], "completed long ago: not run again"
    assert sender.receipts()[-1].timings == {"status_hit": 1}
    assert not leases.leases, "its lease was given back"
    assert run(pipe, old_new) is Outcome.COMPLETE and runs == ["old-never-ran"]
    assert run(pipe, recent) is Outcome.COMPLETE and runs == ["old-never-ran", "recent"]
    assert asked == [old_done.message_id, old_new.message_id], "a recent delivery trusts Redis alone"


def test_the_result_cache_window_is_thirty_minutes_less_the_clock_slack() -> None:
    from reach.core.retention import CLOCK_SLACK_MS, RESULT_TTL_S, may_be_forgotten

    assert Agent("agent://test/ttl").result_ttl_s == RESULT_TTL_S == 1800
    edge = RESULT_TTL_S * 1000 - CLOCK_SLACK_MS
    assert not may_be_forgotten(created_at_ms=0, now_ms=edge - 1, ttl_s=RESULT_TTL_S)
    assert may_be_forgotten(created_at_ms=0, now_ms=edge, ttl_s=RESULT_TTL_S)
    assert may_be_forgotten(created_at_ms=0, now_ms=0, ttl_s=30), "a TTL under the slack always asks"


def test_a_session_is_written_back_only_when_the_runs_completed_is_the_messages_ending() -> None:
    """Final review of this session: the write-back was chosen before the first-terminal claim, so a run that
    completed after the timekeeper's EXPIRED (or a cancel) still moved the session the caller will resend from."""
    published, sessions = _session_run(ended_first=False)
    assert (published, sessions) == (Status.COMPLETED, 1)
    published, sessions = _session_run(ended_first=True)
    assert (published, sessions) == (Status.EXPIRED, 0)


def _session_run(*, ended_first: bool) -> tuple[Status, int]:
    """One run that bumps ctx.session; with `ended_first`, the message's EXPIRED is claimed while it runs. The
    status published and the records written to the sessions topic."""
    sender, leases = FakeSender(), FakeLeases()
    env = envelope({"x": 1}, session_snapshot='{"turn": 1}').model_copy(
        update={"routing": RoutingHints(session_key="s1")})
    expired = codec.encode(receipt_for(env, Status.EXPIRED, error=ErrorInfo(kind="BUDGET", code="DEADLINE",
                                                                             message="published first")))

    def bump(_payload: Any, ctx: Context) -> Any:
        ctx.session["turn"] = ctx.session.get("turn", 0) + 1
        if ended_first:  # the timekeeper's EXPIRED is the message's first ending while the handler still runs
            leases.results[(env.message_id, env.generation)] = expired
        return {"ok": True}

    pipe = Pipeline(agent_with(bump), publisher=sender, leases=leases, receipts_topic=NAMES.receipts,
                    executor=ThreadPoolExecutor(2), middleware=[], completed=_never, redis_outage=Outage(),
                    policy=lambda _cap: None, sessions_topic="ns.sessions")
    run(pipe, env)
    return sender.receipts()[-1].status, len(sender.on("ns.sessions"))


async def _never(_m: str, _g: int) -> None:
    return None
