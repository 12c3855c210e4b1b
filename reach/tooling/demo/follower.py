"""Follows the receipts topic of the demo's namespace from the demo's start and feeds the tally."""

from __future__ import annotations

import threading
from collections.abc import Callable

from confluent_kafka import TopicPartition

from reach.kafka import clients, codec
from reach.kafka.codec import CodecError
from reach.kafka.topicreader import open_reader, start_offsets
from reach.names import Names
from reach.records import Receipt
from reach.settings import KafkaSettings
from reach.tooling.demo.tally import Tally


class ReceiptFollower:
    """A group-less consumer assigned to every receipts partition (no commits, nothing to clean up)."""

    def __init__(self, *, names: Names, tally: Tally, since_ms: int, kafka: KafkaSettings | None = None,
                 heard: Callable[[Receipt], None] | None = None) -> None:
        self.tally = tally
        self.heard = heard  # every receipt read, after the tally (the demo's answerer listens for questions)
        self.undecodable = 0
        self.consumer = open_reader("demo", kafka or KafkaSettings())
        topic = names.receipts
        starts = start_offsets(self.consumer, topic, since_ms)
        self.consumer.assign([TopicPartition(topic, p, offset) for p, offset in starts.items()])

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                for msg in clients.take(self.consumer, 500, 0.2):
                    value = msg.value()
                    if msg.error() or value is None:
                        continue
                    try:
                        receipt = codec.decode(value, Receipt)
                    except CodecError:
                        self.undecodable += 1
                        continue
                    self.tally.add(receipt)
                    if self.heard is not None:
                        self.heard(receipt)
        finally:
            self.consumer.close()
