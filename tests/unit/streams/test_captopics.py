"""The router's topic watcher: a group description that never completes cannot freeze the topic listing."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from types import SimpleNamespace
from typing import Any

from reach.names import Names
from reach.settings import KafkaSettings
from reach.streams.router.captopics import CapabilityTopics

NAMES = Names("ns")


class FakeAdmin:
    """Lists whatever `topics` holds; describe returns a future that completes only if `members` is set."""

    def __init__(self, topics: set[str], members: int | None) -> None:
        self.topics, self.members = topics, members
        self.described = 0

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={t: SimpleNamespace(partitions={p: None for p in range(4)})
                                       for t in self.topics})

    def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
        self.described += 1
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if self.members is not None:
            future.set_result(SimpleNamespace(members=[object()] * self.members))
        return {groups[0]: future}


class FakeConsumer:
    def __init__(self, assigned: bool = True) -> None:
        self.subscriptions: list[list[str]] = []
        self.unsubscribed = 0
        self.assigned = assigned

    def subscribe(self, topics: list[str], on_assign: Any = None, on_revoke: Any = None,
                  on_lost: Any = None) -> None:
        self.subscriptions.append(topics)
        self.callbacks = (on_assign, on_revoke)

    def unsubscribe(self) -> None:
        self.unsubscribed += 1

    def assignment(self) -> list[Any]:
        return [object()] if self.assigned else []


def _watcher(admin: FakeAdmin, counts: list[int]) -> CapabilityTopics:
    return CapabilityTopics(NAMES, 0.01, KafkaSettings(), group="ns.router.capabilities",
                            on_members=counts.append, admin=lambda: admin)


def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_capability_created_later_is_subscribed_while_descriptions_never_complete(monkeypatch: Any) -> None:
    monkeypatch.setattr("reach.streams.router.captopics.DESCRIBE_TIMEOUT_S", 0.05)
    admin, counts, consumer = FakeAdmin({"ns.registry"}, members=None), [], FakeConsumer()
    watcher = _watcher(admin, counts)
    watcher.start()
    try:
        assert not watcher.refresh(consumer)  # nothing to route yet
        _until(lambda: admin.described >= 2)  # the description thread timed out and tried again
        admin.topics |= {"ns.cap.text.echo", "other.cap.text.echo"}
        _until(lambda: watcher.refresh(consumer))
        assert consumer.subscriptions == [["ns.cap.text.echo"]]  # only this namespace's capabilities
        assert counts == []  # no count learned: qps_limit keeps its last one
    finally:
        watcher.stop()


def test_members_are_counted_and_the_subscription_follows_new_and_removed_topics() -> None:
    admin, counts, consumer = FakeAdmin({"ns.cap.a"}, members=2), [], FakeConsumer()
    watcher = _watcher(admin, counts)
    watcher.start()
    try:
        _until(lambda: watcher.refresh(consumer) and 2 in counts)
        admin.topics = {"ns.cap.b"}
        _until(lambda: watcher.refresh(consumer) and watcher.subscribed == frozenset({"ns.cap.b"}))
        assert consumer.subscriptions == [["ns.cap.a"], ["ns.cap.b"]]
    finally:
        watcher.stop()


def test_the_listing_thread_is_not_the_counting_thread() -> None:
    blocked = threading.Event()

    class StuckAdmin(FakeAdmin):
        def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Any]:
            blocked.wait(30)  # a call that blocks outright, not only a pending future
            return super().describe_consumer_groups(groups, request_timeout)

    admin, consumer = StuckAdmin({"ns.cap.a"}, members=1), FakeConsumer()
    watcher = _watcher(admin, [])
    watcher.start()
    try:
        _until(lambda: watcher.refresh(consumer))
        admin.topics = {"ns.cap.a", "ns.cap.b"}
        _until(lambda: watcher.refresh(consumer) and len(watcher.subscribed) == 2)
    finally:
        blocked.set()
        watcher.stop()


def test_a_subscription_left_without_any_assignment_joins_the_group_again() -> None:
    from reach.streams.router.captopics import EMPTY_S, STUCK_S

    admin, consumer = FakeAdmin({"ns.cap.a"}, members=1), FakeConsumer(assigned=False)
    watcher = _watcher(admin, [])
    watcher.list_once(admin)
    watcher.count_once(admin)
    assert watcher.refresh(consumer, now=100.0) and consumer.subscriptions == [["ns.cap.a"]]
    watcher.refresh(consumer, now=100.0 + STUCK_S / 2)
    assert consumer.unsubscribed == 0  # not yet: a join takes a few seconds
    watcher.refresh(consumer, now=101.0 + STUCK_S)
    assert consumer.unsubscribed == 0  # empty once: a rebalance does that for a moment
    watcher.refresh(consumer, now=102.0 + STUCK_S + EMPTY_S)
    assert consumer.unsubscribed == 1 and consumer.subscriptions == [["ns.cap.a"], ["ns.cap.a"]]
    consumer.assigned = True
    watcher.refresh(consumer, now=200.0 + 2 * STUCK_S)
    assert consumer.unsubscribed == 1  # assigned now: left alone


def test_more_members_than_partitions_is_not_stuck() -> None:
    from reach.streams.router.captopics import STUCK_S

    admin, consumer = FakeAdmin({"ns.cap.a"}, members=5), FakeConsumer(assigned=False)  # 4 partitions, 5 workers
    watcher = _watcher(admin, [])
    watcher.list_once(admin)
    watcher.count_once(admin)
    watcher.refresh(consumer, now=100.0)
    watcher.refresh(consumer, now=101.0 + STUCK_S)
    assert consumer.unsubscribed == 0  # one worker without partitions is expected


def test_the_rebalance_callbacks_keep_what_a_diagnosis_reports() -> None:
    watcher = _watcher(FakeAdmin({"ns.cap.text.echo"}, members=1), [])
    watcher.list_once(watcher._admin())
    consumer = FakeConsumer()
    assert watcher.refresh(consumer)
    on_assign, on_revoke = consumer.callbacks
    on_assign(consumer, [object(), object()])
    assert (watcher.assigned, watcher.rebalances) == (2, 1)
    assert "2 partition(s) assigned after 1 rebalance(s)" in watcher.describe()
    on_revoke(consumer, [object(), object()])
    assert watcher.assigned == 0 and "ns.cap.text.echo" in watcher.describe()


class LookupAdmin(FakeAdmin):
    """Also answers one-topic lookups (what a registration's capability triggers), and counts both kinds."""

    def __init__(self, topics: set[str], members: int | None) -> None:
        super().__init__(topics, members)
        self.listed: list[str | None] = []

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:  # type: ignore[override]
        self.listed.append(topic)
        found = super().list_topics(timeout)
        if topic is not None:
            found.topics = {t: m for t, m in found.topics.items() if t == topic}
        return found


def test_a_registered_capability_is_learned_by_a_lookup_and_the_full_listing_is_the_slow_backstop() -> None:
    admin, registered = LookupAdmin({"ns.cap.a"}, members=1), ["a"]
    watcher = CapabilityTopics(NAMES, 1.0, KafkaSettings(), group="ns.router.capabilities", admin=lambda: admin,
                               registered=lambda: registered)
    assert watcher.listing_every_s == 5.0, "the full listing every five refreshes"
    consumer = FakeConsumer()
    watcher.list_once(admin)
    assert watcher.refresh(consumer) and consumer.subscriptions == [["ns.cap.a"]]
    admin.topics |= {"ns.cap.b", "ns.cap.unserved"}
    registered.append("b")
    watcher.learn_once(admin)
    watcher.refresh(consumer)
    assert consumer.subscriptions[-1] == ["ns.cap.a", "ns.cap.b"], "served: learned without a full listing"
    assert admin.listed == [None, "ns.cap.b"]
    watcher.learn_once(admin)
    assert admin.listed == [None, "ns.cap.b"], "nothing new: no request at all"
    watcher.list_once(admin)
    watcher.refresh(consumer)
    assert consumer.subscriptions[-1] == ["ns.cap.a", "ns.cap.b", "ns.cap.unserved"], "the backstop finds the rest"


def test_a_registered_capability_without_a_topic_is_looked_up_once_per_listing() -> None:
    admin = LookupAdmin({"ns.cap.a"}, members=1)
    watcher = CapabilityTopics(NAMES, 1.0, KafkaSettings(), group="ns.router.capabilities", admin=lambda: admin,
                               registered=lambda: ["a", "nowhere", "Not A Name!"])
    watcher.list_once(admin)
    for _ in range(3):
        watcher.learn_once(admin)
    assert admin.listed == [None, "ns.cap.nowhere"], "once, and never for a name that is not a capability"
    watcher.list_once(admin)
    watcher.learn_once(admin)
    assert admin.listed == [None, "ns.cap.nowhere", None, "ns.cap.nowhere"]
    assert watcher.refresh(FakeConsumer()) and watcher.subscribed == frozenset({"ns.cap.a"})


def test_the_group_is_described_at_start_and_after_each_assignment_not_every_refresh() -> None:
    admin, counts, consumer = LookupAdmin({"ns.cap.a"}, members=2), [], FakeConsumer()
    watcher = CapabilityTopics(NAMES, 0.01, KafkaSettings(), group="ns.router.capabilities", admin=lambda: admin,
                               on_members=counts.append, registered=lambda: ["a"])
    watcher.start()
    try:
        _until(lambda: watcher.refresh(consumer) and counts == [2])
        _until(lambda: watcher.listings >= 4)  # twenty refreshes and more went by
        assert admin.described == 1, "the count is known: no description until something rebalances"
        admin.members = 3
        on_assign, _ = consumer.callbacks
        on_assign(consumer, [object()])
        _until(lambda: counts == [2, 3])
        assert admin.described == 2
    finally:
        watcher.stop()
