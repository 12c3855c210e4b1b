"""The router's subscription to every capability topic, and its count of fellow hot-path workers.

Both come from admin requests made on threads of their own, each bounded by a timeout: the routing
thread only reads what they last learned, so no admin request can stall routing or each other.

Neither asks the broker more often than needed (issue 23, item 7; docs/decisions/0033-one-feed-per-process.md):
- The topics of the capabilities live registrations serve (the registry the router reads anyway) are looked up
  one by one, once, when a registration names them: a served capability is routed within a refresh. The full
  listing of the cluster's topics (36-158 ms of broker time with 1,200 topics) is the backstop for topics no
  registration names (a capability nobody serves yet: its requests end UNROUTABLE) and for deleted ones: every
  `BACKSTOP_EVERY` refreshes instead of every refresh.
- The group is described when this member is assigned (every rebalance reaches every member of the eager
  group, and only a rebalance changes the member count), again while a description fails, and otherwise every
  `DESCRIBE_EVERY_S` as a backstop."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from reach.errors import InvalidName
from reach.kafka import clients
from reach.kafka.types import KafkaException
from reach.names import Names
from reach.settings import KafkaSettings
from reach.streams import groupadmin

log = logging.getLogger("reach.router")

DESCRIBE_TIMEOUT_S = 5.0
"""Longest wait for one group description. librdkafka can leave a coordinator request's future pending
for good (a FindCoordinator timed out under load, confluentinc/librdkafka#4605): the next try starts over."""


STUCK_S = 10.0
"""A subscription this old with no partition assigned to this worker, while the topics have at least as many
partitions as the group has members, is stuck: the worker joins the group again."""

BACKSTOP_EVERY = 5
"""With registrations to learn topics from, the full listing runs every this many refreshes (10 s by default)."""

DESCRIBE_EVERY_S = 60.0
"""The group description's backstop period; a rebalance (this member assigned) asks at once."""

EMPTY_S = 6.0
"""How long the assignment must have stayed empty: a rebalance (eager: everything revoked, then assigned) empties
it for a few seconds, a member that died without leaving for up to its session timeout."""


class Subscriber(Protocol):
    """What the topic watcher needs of a consumer (reach.kafka.types.Consumer, or an in-memory fake)."""

    def subscribe(self, topics: list[str], on_assign: Callable[[Any, list[Any]], None] | None = ...,
                  on_revoke: Callable[[Any, list[Any]], None] | None = ...,
                  on_lost: Callable[[Any, list[Any]], None] | None = ...) -> None: ...

    def unsubscribe(self) -> None: ...

    def assignment(self) -> list[Any]: ...


class CapabilityTopics:
    """The explicit subscription to every capability topic, refreshed from metadata.

    librdkafka's regex subscription misses a topic created while the group rebalances (a new
    worker joining) until some later topic appears (librdkafka#3008): with two workers a new
    capability waited a minute or more. Comparing the matching topics with the subscription every
    `every_s` and re-subscribing when they differ always converges, whatever the group was doing.

    The member count (qps_limit is shared among the hot path's workers) is learned on a second thread:
    when it shared the listing's thread, one description that never completed froze the listing too,
    and a capability created after the router started was never subscribed."""

    def __init__(self, names: Names, every_s: float, kafka: KafkaSettings, *, group: str,
                 on_members: Callable[[int], None] = lambda _n: None,
                 on_revoked: Callable[[Any, list[Any]], None] = lambda _c, _p: None,
                 on_assigned: Callable[[Any, list[Any]], None] = lambda _c, _p: None,
                 on_lost: Callable[[Any, list[Any]], None] = lambda _c, _p: None,
                 admin: Callable[[], Any] | None = None, groups: Callable[[], Any] | None = None,
                 registered: Callable[[], Iterable[str]] | None = None, listing_every_s: float | None = None,
                 describe_every_s: float = DESCRIBE_EVERY_S) -> None:
        self.names = names
        self.prefix = names.capability_prefix
        self.group = group
        self.on_members = on_members
        self.on_revoked = on_revoked  # the router's final commit of what it hands over
        self.on_assigned = on_assigned
        self.on_lost = on_lost  # partitions gone without a revoke: their commit bookkeeping is forgotten
        self.every_s = every_s
        # capabilities live registrations serve: their topics are looked up as soon as they appear
        self._registered = registered
        self.listing_every_s = listing_every_s or (every_s * BACKSTOP_EVERY if registered is not None else every_s)
        self.describe_every_s = describe_every_s
        self.subscribed: frozenset[str] = frozenset()
        # a lookup of one topic must never create it (a producer-side handle would ask the broker to)
        self._admin = admin or (lambda: clients.admin(kafka, **{"allow.auto.create.topics": False}))
        # group descriptions are coordinator requests, which librdkafka can abort the process in when a broker
        # dies mid-request: a child process makes them (reach.streams.groupadmin)
        self._groups = groups or admin or (lambda: groupadmin.shared(kafka))
        self._latest: frozenset[str] = frozenset()
        self._sizes: dict[str, int] = {}  # partitions per known capability topic
        self._looked: set[str] = set()  # registered topics looked up since the last full listing
        self._partitions = 0  # of the matching topics, at the last listing or lookup
        self._members = 1  # of the hot path's group, at the last description
        self._since = 0.0  # when the current subscription was made (or last renewed)
        self._checked = 0.0
        self._empty_since: float | None = None  # since when this worker has had no partition at all
        self._listed = threading.Event()
        self._stop = threading.Event()
        self._recount = threading.Event()  # set by a rebalance (and by stop): describe the group now
        self.listings = 0  # full listings made
        self.lookups = 0  # one-topic lookups made
        self.descriptions = 0  # group descriptions asked for
        self.assigned = 0  # partitions this worker holds, as the last rebalance left them
        self.rebalances = 0

    def start(self) -> None:
        """List the cluster's topics on a thread of its own: a full metadata request took 36-158 ms with
        1,200 topics on the local broker, and made on the routing thread it stalled every request behind it."""
        threading.Thread(target=self._list_forever, name="reach-router-topics", daemon=True).start()
        threading.Thread(target=self._count_forever, name="reach-router-members", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._recount.set()

    def _list_forever(self) -> None:
        admin = self._admin()
        full_at = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= full_at:
                full_at = time.monotonic() + self.listing_every_s
                self.list_once(admin)
            else:
                self.learn_once(admin)
            self._stop.wait(self.every_s)

    def list_once(self, admin: Any) -> None:
        """The full listing: every capability topic of the namespace (the backstop)."""
        try:
            self.listings += 1
            listed = admin.list_topics(timeout=5).topics
            self._sizes = {t: len(getattr(listed[t], "partitions", None) or {}) for t in listed
                           if t.startswith(self.prefix)}
            self._looked.clear()
            self._known(frozenset(self._sizes))
            self._listed.set()
        except KafkaException as exc:  # the next listing tries again; routing goes on with what it has
            log.warning("listing capability topics failed: %s", exc)

    def learn_once(self, admin: Any) -> None:
        """Look up the topics of registered capabilities not known yet, each once until the next full listing (an
        agent creates its capability topics before it registers, so a missing one is rare)."""
        if self._registered is None:
            return
        new = set()
        for capability in self._registered():
            try:
                topic = self.names.capability(capability)
            except InvalidName:
                continue
            if topic not in self._latest and topic not in self._looked:
                new.add(topic)
        found = {}
        for topic in sorted(new):
            self._looked.add(topic)
            self.lookups += 1
            try:
                meta = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            except KafkaException as exc:
                log.warning("looking up capability topic %s failed (the full listing finds it): %s", topic, exc)
                continue
            if meta is not None and getattr(meta, "error", None) is None and getattr(meta, "partitions", None):
                found[topic] = len(meta.partitions)
        if found:
            self._sizes.update(found)
            self._known(self._latest | frozenset(found))
            log.info("learned %d capability topic(s) from registrations: %s", len(found), ", ".join(sorted(found)))

    def _known(self, topics: frozenset[str]) -> None:
        self._partitions = sum(self._sizes.get(t, 0) for t in topics)
        self._latest = topics

    def _count_forever(self) -> None:
        admin = self._groups()
        due = 0.0
        while not self._stop.is_set():
            self._recount.wait(max(due - time.monotonic(), 0.0))
            if self._stop.is_set():
                return
            self._recount.clear()
            due = time.monotonic() + (self.describe_every_s if self.count_once(admin) else self.every_s)

    def count_once(self, admin: Any) -> bool:
        """The hot path's workers; the last count stays when the broker does not answer in time (or the
        principal may not describe the group). True when it answered."""
        self.descriptions += 1
        try:
            future = admin.describe_consumer_groups([self.group], request_timeout=DESCRIBE_TIMEOUT_S)[self.group]
            group = future.result(timeout=DESCRIBE_TIMEOUT_S + 1)
            self._members = max(len(group.members), 1)
            self.on_members(self._members)
            return True
        except concurrent.futures.TimeoutError:
            log.debug("describing %s timed out (qps_limit keeps the last worker count)", self.group)
        except Exception as exc:  # noqa: BLE001 - never stop counting over one failed description
            log.debug("describing %s failed (qps_limit keeps the last worker count): %s", self.group, exc)
        return False

    def refresh(self, consumer: Subscriber, now: float | None = None) -> bool:
        """Re-subscribe when the matching topics changed, or join again when the subscription is stuck; True
        while subscribed to at least one."""
        now = time.monotonic() if now is None else now
        if not self.subscribed:
            self._listed.wait(0.2)
        topics = self._latest
        if topics and topics != self.subscribed:
            self._subscribe(consumer, topics)
            log.info("subscribed to %d capability topic(s): %s", len(topics), ", ".join(sorted(topics)))
            self.subscribed, self._since = topics, now
        elif self.subscribed and now - self._checked >= 1.0:
            self._checked = now
            self._unstick(consumer, now)
        return bool(self.subscribed)

    def _unstick(self, consumer: Subscriber, now: float) -> None:
        """librdkafka sometimes leaves a member that subscribed to a topic created moments before with no
        assignment at all (the same family as librdkafka#3008): nothing is routed from it until something else
        makes the group rebalance. With enough partitions for every member, an empty assignment after
        STUCK_S is that case: leave and join again."""
        if now - self._since < STUCK_S or self._partitions < self._members:
            self._empty_since = None
            return
        try:
            assigned = bool(consumer.assignment())
        except KafkaException:
            return
        if assigned:
            self._empty_since = None
            return
        if self._empty_since is None:  # a rebalance empties every assignment for a moment: only a lasting one
            self._empty_since = now
        if now - self._empty_since < EMPTY_S:
            return
        log.warning("subscribed to %d capability topic(s) for %.0f s with no partition assigned (%d partitions, "
                    "%d member(s)): joining the group again", len(self.subscribed), now - self._since,
                    self._partitions, self._members)
        consumer.unsubscribe()
        self._subscribe(consumer, self.subscribed)
        self._since, self._empty_since = now, None

    def _subscribe(self, consumer: Subscriber, topics: frozenset[str]) -> None:
        consumer.subscribe(sorted(topics), on_assign=self._on_assign, on_revoke=self._on_revoke,
                           on_lost=self.on_lost)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        """Logged, so a log says when routing of a new capability could start (and when it could not)."""
        self.on_assigned(consumer, partitions)
        self.assigned, self.rebalances = len(partitions), self.rebalances + 1
        self._recount.set()  # a rebalance is when the member count changes: describe the group now
        log.info("assigned %d partition(s) of %d capability topic(s), %.1f s after subscribing (rebalance %d)",
                 len(partitions), len(self.subscribed), time.monotonic() - self._since, self.rebalances)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigned = 0
        self.on_revoked(consumer, partitions)
        log.info("revoked %d partition(s)", len(partitions))

    def describe(self) -> str:
        """What a test that waited in vain reports: the subscription and the assignment."""
        return (f"subscribed to {len(self.subscribed)} capability topic(s) ({', '.join(sorted(self.subscribed))}), "
                f"{self.assigned} partition(s) assigned after {self.rebalances} rebalance(s); the listing has "
                f"{len(self._latest)} topic(s), {self._partitions} partition(s); {self._members} worker(s)")
