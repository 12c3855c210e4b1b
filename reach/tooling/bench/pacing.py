"""Open-loop sending: requests on a fixed schedule, never waiting for an answer before the next one is due."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from confluent_kafka import Producer


def schedule(offered: float, count: int) -> Iterator[tuple[int, int]]:
    """(seq, created_at ms) for `count` sends at `offered`/s, sleeping until each is due: created_at is the
    scheduled time, so a sender that falls behind shows as latency instead of a lower rate."""
    start = time.time()
    for seq in range(count):
        due = start + seq / offered
        wait = due - time.time()
        if wait > 0.0005:
            time.sleep(wait)
        yield seq, int(due * 1000)


def produce(producer: Producer, send: Callable[[], None]) -> None:
    """Call `send` (one `producer.produce`), serving delivery reports while librdkafka's queue is full."""
    while True:
        try:
            send()
            break
        except BufferError:
            producer.poll(0.01)
    producer.poll(0)
