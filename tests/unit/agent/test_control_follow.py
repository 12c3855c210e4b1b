"""The SDK follows operator control records: DISABLE of its own instance pauses the inbox and ENABLE resumes it,
DRAIN stops the loop (drain, deregister, exit) and removes the DRAIN record on the way out; another instance's
records change nothing. The client takes POLICY timeouts and budget at send time."""

from __future__ import annotations

from reach.agent.policy import AgentControl, Mode, mode_of
from reach.client import Client
from reach.control import instance_record, policy_record
from reach.envelopes import BUDGET_MS, DELIVERY_TIMEOUT_MS
from reach.kafka import codec
from reach.records import Control, InstanceAction, Policy
from tests.unit.agent.fakes import FakeControl
from tests.unit.agent.test_runner import runner


def tell(feed: FakeControl, record: Control) -> None:
    feed.view.apply(record.key, record)


def test_disable_pauses_the_inbox_enable_resumes_it_and_others_records_do_nothing() -> None:
    r, consumer = runner()
    feed = FakeControl()
    r._policies = AgentControl(feed, instance_id="i-1")
    r._owned = {0}
    tell(feed, instance_record("i-2", InstanceAction.DISABLE))
    r._obey()
    r._flow()
    assert not consumer.paused and r._mode is Mode.RUN
    tell(feed, instance_record("i-1", InstanceAction.DISABLE))
    r._obey()
    r._flow()
    assert consumer.paused and not r._stop.is_set(), "disabled: registered and running, reading nothing new"
    tell(feed, instance_record("i-1", InstanceAction.ENABLE))
    r._obey()
    r._flow()
    assert not consumer.paused and r._mode is Mode.RUN


def test_drain_stops_the_loop_and_the_drain_record_is_removed_on_the_way_out() -> None:
    r, _consumer = runner()
    feed = FakeControl()
    r._policies = AgentControl(feed, instance_id="i-1")
    tell(feed, instance_record("i-1", InstanceAction.DRAIN))
    r._obey()
    assert r._stop.is_set() and r._mode is Mode.DRAIN
    r.heartbeat.tombstone = lambda: None  # type: ignore[attr-defined]
    r._deregister()
    [removed] = r.publisher.on(r.names.control)  # type: ignore[attr-defined]
    assert (removed.key, removed.value) == ("INSTANCE:i-1", None)


def test_mode_of_reads_only_the_instance_s_own_override() -> None:
    feed = FakeControl()
    assert mode_of(feed.view, "i-1") is Mode.RUN
    tell(feed, instance_record("i-1", InstanceAction.DRAIN))
    assert (mode_of(feed.view, "i-1"), mode_of(feed.view, "i-9")) == (Mode.DRAIN, Mode.RUN)
    feed.view.apply("INSTANCE:i-1", None)  # a tombstone lifts it
    assert mode_of(feed.view, "i-1") is Mode.RUN


def test_the_client_takes_timeouts_and_budget_from_the_capability_policy_at_send_time() -> None:
    feed = FakeControl()
    client = Client(control=feed)
    plain = client.envelope("demo.echo", {})
    assert plain.delivery_timeout_ms == DELIVERY_TIMEOUT_MS and plain.deadline - plain.created_at == BUDGET_MS
    tell(feed, policy_record(Policy(delivery_timeout_ms=1_500, budget_ms=9_000), scope="*"))
    tell(feed, policy_record(Policy(execution_timeout_ms=2_500), scope="demo.echo"))
    env = client.envelope("demo.echo", {})
    assert (env.delivery_timeout_ms, env.execution_timeout_ms, env.deadline - env.created_at) == (1_500, 2_500, 9_000)
    other = client.envelope("demo.other", {})
    assert other.execution_timeout_ms != 2_500, "a capability's record applies to that capability only"
    explicit = client.envelope("demo.echo", {}, execution_timeout_ms=7_000, budget_ms=60_000)
    assert (explicit.execution_timeout_ms, explicit.deadline - explicit.created_at) == (7_000, 60_000)
    assert codec.encode(env)
