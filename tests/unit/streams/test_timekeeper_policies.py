"""A status-only worker's timekeeper reads policies from the process's feed (no re-read of the control topic)."""

from __future__ import annotations

import time
import uuid

from reach.control import policy_record
from reach.kafka import clients, memory
from reach.kafka.codec import encode
from reach.names import Names
from reach.records import Policy
from reach.settings import KafkaSettings
from reach.streams.feed import Feed
from reach.streams.timekeeper.policies import Policies

NAMES = Names("tkpol")


def test_policies_follow_the_control_topic_through_the_feed_and_a_bad_record_is_skipped() -> None:
    name = f"tkpol-{uuid.uuid4().hex[:8]}"
    memory.bus(name).create_topic(NAMES.control, 1)
    kafka = KafkaSettings(bootstrap=memory.SCHEME + name)
    producer = clients.producer(kafka)
    before = policy_record(Policy(max_attempts=2), scope="text.echo")
    producer.produce(NAMES.control, key=before.key.encode(), value=encode(before))
    producer.produce(NAMES.control, key=b"POLICY:x.y", value=b"\x00junk")
    assert producer.flush(1) == 0
    feed = Feed(names=NAMES, kafka=kafka)
    policies = Policies(names=NAMES, feed=feed)
    feed.acquire()
    try:
        assert feed.wait_loaded(5)
        assert policies.policy("text.echo").max_attempts == 2 and policies.view.refused == 1
        later = policy_record(Policy(max_attempts=5), scope="*")
        producer.produce(NAMES.control, key=later.key.encode(), value=encode(later))
        assert producer.flush(1) == 0
        deadline = time.monotonic() + 5
        while policies.policy("other.cap").max_attempts != 5:
            assert time.monotonic() < deadline, "the * policy never arrived"
            time.sleep(0.01)
        assert policies.policy("text.echo").max_attempts == 2, "the capability's own policy still wins"
    finally:
        feed.release(5)
        memory.forget(name)
