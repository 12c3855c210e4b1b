"""Mode `raw`: a plain confluent-kafka forwarder (consume(500) -> produce the same bytes -> flush -> commit).

The practical limit for moving one message one hop in Python on this machine, with the same producer
settings as the router (the `hot` profile: idempotent, acks=all, lz4; the flush sends each batch at once)
and the same commit-after-ack rule.
"""

from __future__ import annotations

import threading

from confluent_kafka import Consumer, Producer, TopicPartition

from reach.settings import KafkaSettings
from reach.tooling.bench.progress import analyse_forwards, result, wait_outputs
from reach.tooling.bench.results import ModeResult, own_cpu
from reach.tooling.bench.workspace import Workspace, envelopes, message_id


def forward(kafka: KafkaSettings, group: str, source: str, sink: str, stop: threading.Event) -> None:
    """Forward `source` to `sink` until `stop` is set; commit each batch after its records are acked."""
    consumer = Consumer(kafka.consumer(group))
    producer = Producer(kafka.producer(profile="hot"))
    consumer.subscribe([source])
    try:
        while not stop.is_set():
            messages = consumer.consume(500, timeout=0.2)
            if not messages:
                continue
            last: dict[tuple[str, int], int] = {}
            for msg in messages:
                if msg.error() is not None:
                    continue
                producer.produce(sink, key=msg.key(), value=msg.value(), headers=msg.headers())
                last[(msg.topic() or "", msg.partition() or 0)] = msg.offset() or 0
            if producer.flush(30):
                raise RuntimeError("raw forwarder: records not acknowledged within 30 s")
            consumer.commit(offsets=[TopicPartition(t, p, o + 1) for (t, p), o in last.items()], asynchronous=True)
    finally:
        producer.flush(10)
        consumer.close()


def run(ws: Workspace, *, messages: int, warmup: int, timeout: float = 120.0) -> ModeResult:
    source = ws.ensure(ws.names.topic("bench.raw.in"))
    sink = ws.ensure_sink(ws.names.topic("bench.raw.out"))
    created: dict[str, int] = {}
    ws.burst(envelopes(ws, "raw", source, "bench.raw", warmup + messages, created))
    stop = threading.Event()
    thread = threading.Thread(target=forward, args=(ws.kafka, f"{ws.namespace}.raw", source, sink, stop),
                              name="bench-raw", daemon=True)
    thread.start()
    progress = wait_outputs(ws, [sink], warmup=warmup, total=warmup + messages, cpu=own_cpu, timeout=timeout,
                            alive=thread.is_alive)
    stop.set()
    thread.join(15)
    measured = {message_id("raw", s) for s in range(warmup, warmup + messages)}
    outputs = ((r.key.decode(), r.timestamp) for r in ws.read([sink]) if r.key)
    forwards = analyse_forwards("raw", outputs, created, measured, basis="created_at -> sink append (burst)")
    return result("raw", progress, forwards, messages,
                  notes="one process; CPU = the whole bench process while forwarding")

