"""Mode `publish`: how many envelopes one SDK process publishes with every acknowledgement checked.

Four rows in one namespace, one after the other: `Client.send` one at a time (each waits for its ack),
`Client.send_many` in batches, `AsyncClient.send` with N concurrent callers, and a plain confluent-kafka producer
given the same record bytes with the same producer settings (the `hot` profile) as the baseline. Every row counts
each record's delivery report: a refused or unacknowledged one is `lost`. CPU is this whole process (the SDK's
Python and librdkafka's threads) per envelope; the SDK rows include building each envelope (ids, POLICY defaults,
validation), encoding it and its trace headers, which the baseline does not do.
"""

from __future__ import annotations

import asyncio
import time

from confluent_kafka import Producer

from reach.aioclient import AsyncClient
from reach.client import Client, Request
from reach.kafka.pipeline import Outbound
from reach.settings import ReachSettings
from reach.tooling.bench.results import ModeResult, own_cpu
from reach.tooling.bench.workspace import PAYLOAD, Workspace

CAPABILITY = "bench.publish"
SINGLE_SHARE = 10  # `Client.send` one at a time is slow by design: it publishes a tenth of the messages
BATCH = 1_000  # requests per `send_many`
CONCURRENCY = 256  # concurrent `AsyncClient.send` callers
SDK_ROWS = ("publish send_many", f"publish AsyncClient x{CONCURRENCY}")
"""The rows whose best rate is `sdk_publish_rps` (the pipelined SDK paths)."""


def run(ws: Workspace, *, messages: int, warmup: int) -> list[ModeResult]:
    settings = ReachSettings(namespace=ws.namespace, topics_file=ws.topics_file)
    client = Client(kafka=ws.kafka, settings=settings, source="bench-publish")
    try:
        client.send_many([(CAPABILITY, PAYLOAD)] * max(warmup, 1))  # the topic, the control topic, the connections
        single = max(messages // SINGLE_SHARE, 1)
        watch = _Watch()
        rows = [watch.row("publish send", single, _one_at_a_time(client, single), "Client.send, one at a time")]
        watch = _Watch()
        rows.append(watch.row("publish send_many", messages, _batches(client, messages),
                              f"Client.send_many, {BATCH:,} requests per call"))
        records = [client.outbound(client.envelope(CAPABILITY, PAYLOAD)) for _ in range(messages)]
    finally:
        client.close()
    rows.append(asyncio.run(_concurrent(ws, settings, messages, warmup)))
    producer = Producer(ws.kafka.producer(profile="hot"))
    watch = _Watch()
    rows.append(watch.row("publish plain confluent-kafka", messages, _plain(producer, records),
                          "Producer.produce + on_delivery + flush, the SDK's record bytes and producer settings"))
    return rows


class _Watch:
    """Wall time and this process's CPU since it was made."""

    def __init__(self) -> None:
        self._cpu, self._start = own_cpu(), time.perf_counter()

    def row(self, mode: str, messages: int, lost: int, what: str) -> ModeResult:
        """The row of `messages` published since, `lost` of them not acknowledged."""
        seconds, used = time.perf_counter() - self._start, own_cpu() - self._cpu
        us = used / messages * 1e6
        return ModeResult(mode=mode, messages=messages, throughput=messages / seconds, latency=None,
                          cpu_per_1k=used / messages * 1000, lost=lost, duplicated=0,
                          figures={"cpu_us_per_envelope": round(us, 1), "seconds": round(seconds, 3)},
                          notes=f"{what}: {messages / seconds:,.0f} envelopes/s acknowledged, {us:,.1f} µs CPU each")


def _one_at_a_time(client: Client, messages: int) -> int:
    for _ in range(messages):
        client.send(CAPABILITY, PAYLOAD)  # raises unless acknowledged
    return 0


def _batches(client: Client, messages: int) -> int:
    lost = 0
    for start in range(0, messages, BATCH):
        sent = client.send_many([Request(CAPABILITY, PAYLOAD)] * min(BATCH, messages - start))
        lost += sum(1 for s in sent if not s.ok)
    return lost


async def _concurrent(ws: Workspace, settings: ReachSettings, messages: int, warmup: int) -> ModeResult:
    async with AsyncClient(kafka=ws.kafka, settings=settings, source="bench-publish") as client:
        await client.send_many([(CAPABILITY, PAYLOAD)] * max(warmup, 1))  # connections and the control topic
        todo = iter(range(messages))

        async def caller() -> None:
            for _ in todo:
                await client.send(CAPABILITY, PAYLOAD)  # raises unless acknowledged

        watch = _Watch()
        await asyncio.gather(*(caller() for _ in range(CONCURRENCY)))
        return watch.row(f"publish AsyncClient x{CONCURRENCY}", messages, 0,
                         f"AsyncClient.send, {CONCURRENCY} concurrent callers")


def _plain(producer: Producer, records: list[Outbound]) -> int:
    failed = [0]

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed[0] += 1

    for record in records:
        while True:
            try:
                producer.produce(record.topic, record.value, record.key, headers=record.headers,
                                 on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(60)
    return failed[0] + left
