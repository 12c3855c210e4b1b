"""The plain confluent-kafka request-reply worker the peers mode measures Reach beside.

    python -m reach.tooling.bench.peer_worker REQUESTS REPLIES GROUP

What a careful Python user writes without a framework: a consumer in a group reads requests in batches (a
blocking poll for the first record, then whatever else is there without waiting), decodes each JSON body, produces
one reply per request to REPLIES (keyed like the request, its `correlation_id` header copied), flushes, and only
then commits the batch's offsets: asynchronously, at most one commit in flight (the points reached meanwhile ride
on the next one). The producer is Reach's `hot` producer (idempotent, acks=all, lz4, linger 2 ms). SIGTERM stops it
after the batch in hand.
"""

from __future__ import annotations

import json
import signal
import sys
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from reach.settings import KafkaSettings
from reach.tooling.bench import pacing
from reach.tooling.bench.peer_client import CORRELATION_ID, correlation_id

REPLY = b"{}"


class Worker:
    """One consumer, one producer, a commit ledger of one: `wanted` offsets and whether a commit is in flight."""

    def __init__(self, kafka: KafkaSettings, requests: str, replies: str, group: str) -> None:
        self.replies = replies
        self.in_flight = False
        self.wanted: dict[tuple[str, int], int] = {}
        self.sent: dict[tuple[str, int], int] = {}  # the commit in flight, handed back if it fails
        self.running = True
        self.consumer = Consumer(kafka.consumer(group, profile="hot", on_commit=self._committed))
        self.producer = Producer(kafka.producer(profile="hot"))
        self.consumer.subscribe([requests])

    def run(self) -> None:
        while self.running:
            first = self.consumer.poll(0.1)
            if first is None:
                self._commit()
                continue
            batch = [first, *self.consumer.consume(499, 0)]
            for msg in batch:
                if msg.error() is not None:
                    continue
                json.loads(msg.value() or b"{}")  # the handler: read the request, answer an empty object
                cid = correlation_id(msg)
                pacing.produce(self.producer, partial(self.producer.produce, self.replies, key=msg.key(), value=REPLY,
                                                      headers=[(CORRELATION_ID, cid)] if cid else None))
                self.wanted[(msg.topic() or "", msg.partition() or 0)] = (msg.offset() or 0) + 1
            if self.producer.flush(30):
                raise RuntimeError("replies not acknowledged within 30 s")
            self._commit()

    def close(self) -> None:
        self.producer.flush(10)
        if self.wanted:
            self.consumer.commit(offsets=self._offsets(), asynchronous=False)
        self.consumer.close()

    def _commit(self) -> None:
        if self.in_flight or not self.wanted:
            return
        self.consumer.commit(offsets=self._offsets(), asynchronous=True)
        self.sent, self.wanted, self.in_flight = self.wanted, {}, True

    def _offsets(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, o) for (t, p), o in self.wanted.items()]

    def _committed(self, err: KafkaError | None, _partitions: Any) -> None:
        if err is not None:  # sent again with the next commit, unless a newer point superseded it
            for tp, offset in self.sent.items():
                self.wanted[tp] = max(offset, self.wanted.get(tp, 0))
        self.sent, self.in_flight = {}, False


def main(argv: list[str]) -> None:
    requests, replies, group = argv
    worker = Worker(KafkaSettings(), requests, replies, group)

    def stop(*_: Any) -> None:
        worker.running = False

    signal.signal(signal.SIGTERM, stop)
    try:
        worker.run()
    finally:
        worker.close()


if __name__ == "__main__":
    main(sys.argv[1:])
