"""What the batch worker's window (`Subscription.window_ms`) buys: CPU and broker requests per record, and latency.

A forwarding worker (reach.kafka.worker: read a batch, produce each record to a second topic, wait for the acks,
commit) reads a 4-partition topic that a separate process fills at a paced --rate with 300-byte records. For each
window in --windows and each rate, after --warmup seconds, for --seconds: this process's CPU per record (the
worker's thread and librdkafka's), the requests the worker's consumer and producer sent to the broker per record
(librdkafka statistics: Fetch, Produce, OffsetCommit, Heartbeat ...), the mean batch size, and the p50 / p99 of
record timestamp -> handled. The variants alternate, --repeats times. Decision 0053 quotes its runs:

    .venv/bin/python scripts/worker_window.py --rates 300,1500 --windows 0,5 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import NewTopic  # noqa: E402

from reach.kafka import clients  # noqa: E402
from reach.kafka.worker import BatchStats, Output, Record, Subscription, Worker, WorkerMetrics  # noqa: E402
from reach.settings import KafkaSettings  # noqa: E402

PARTITIONS = 4


class Requests:
    """Requests a client sent to the brokers, from librdkafka's statistics (cumulative per client)."""

    def __init__(self) -> None:
        self.by_client: dict[str, dict[str, int]] = {}

    def stats_cb(self, raw: str) -> None:
        stats = json.loads(raw)
        totals: dict[str, int] = {}
        for broker in stats.get("brokers", {}).values():
            for kind, n in (broker.get("req") or {}).items():
                totals[kind] = totals.get(kind, 0) + n
        self.by_client[stats["name"]] = totals

    def total(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for totals in self.by_client.values():
            for kind, n in totals.items():
                out[kind] = out.get(kind, 0) + n
        return out


class Forward(Worker[bytes]):
    def __init__(self, kafka: KafkaSettings, sub: Subscription, target: str) -> None:
        super().__init__(kafka=kafka, subscription=sub)
        self.target = target
        self.lags: list[float] = []

    def handle(self, records: list[Record[bytes]]) -> Iterable[Output]:
        now = time.time() * 1000
        self.lags.extend(now - int(r.key or b"0") for r in records)
        return [Output(self.target, r.raw, key=r.key, cause=r.position) for r in records]


class Batches(WorkerMetrics):
    def __init__(self) -> None:
        self.records = 0
        self.batches = 0

    def batch(self, worker: str, stats: BatchStats) -> None:
        self.records += stats.records
        self.batches += 1


def fill(bootstrap: str, topic: str, rate: float, seconds: float) -> None:
    """The paced writer (its own process): one 300-byte record every 1/rate s, keyed by its send time in ms."""
    producer = clients.producer(KafkaSettings.model_construct(bootstrap=bootstrap))
    start = time.monotonic()
    n = 0
    while time.monotonic() < start + seconds:
        producer.produce(topic, value=b"x" * 300, key=b"%d" % int(time.time() * 1000))
        producer.poll(0)
        n += 1
        pause = start + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    producer.flush(10)


def run(bootstrap: str, rate: float, window_ms: int, warmup: float, seconds: float) -> dict[str, Any]:
    kafka = KafkaSettings.model_construct(bootstrap=bootstrap)
    tag = uuid.uuid4().hex[:8]
    source, target = f"window.in.{tag}", f"window.out.{tag}"
    admin = clients.admin(kafka)
    for topic in (source, target):
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    requests = Requests()
    stats = {"statistics.interval.ms": 1_000, "stats_cb": requests.stats_cb}
    sub = Subscription(group=f"window.{tag}", topics=[source], window_ms=window_ms, consumer_config=stats,
                       producer_config=stats)
    batches = Batches()
    worker = Forward(kafka, sub, target)
    worker.metrics.append(batches)
    writer = multiprocessing.get_context("spawn").Process(target=fill,
                                                          args=(bootstrap, source, rate, warmup + seconds + 2))
    with worker:
        worker.wait_ready(30)
        writer.start()
        time.sleep(warmup)
        cpu0, req0, rec0, bat0, lag0 = (time.process_time(), requests.total(), batches.records, batches.batches,
                                        len(worker.lags))
        time.sleep(seconds)
        time.sleep(1.1)  # one more statistics interval
        cpu1, req1, rec1, bat1 = time.process_time(), requests.total(), batches.records, batches.batches
        lags = worker.lags[lag0:]
    writer.join()
    admin.delete_topics([source, target])
    records = max(rec1 - rec0, 1)
    sent = {k: req1.get(k, 0) - req0.get(k, 0) for k in req1}
    lags.sort()
    return {
        "rate": rate, "window_ms": window_ms, "records": records,
        "cpu_ms_per_1k": round((cpu1 - cpu0) * 1e6 / records, 1),
        "requests_per_record": round(sum(sent.values()) / records, 3),
        "fetch": round(sent.get("Fetch", 0) / records, 3), "produce": round(sent.get("Produce", 0) / records, 3),
        "commit": round(sent.get("OffsetCommit", 0) / records, 3),
        "batch": round(records / max(bat1 - bat0, 1), 1),
        "lag_p50_ms": round(statistics.median(lags), 1) if lags else None,
        "lag_p99_ms": round(lags[int(len(lags) * 0.99) - 1], 1) if lags else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="300,1500")
    parser.add_argument("--windows", default="0,5")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    bootstrap = os.environ.get("REACH_BOOTSTRAP") or "127.0.0.1:9092"
    print("rate  window_ms  records  cpu_ms/1k  req/record (fetch produce commit)  batch  lag p50/p99 ms")
    for _ in range(args.repeats):
        for rate in (float(r) for r in args.rates.split(",")):
            for window in (int(w) for w in args.windows.split(",")):
                r = run(bootstrap, rate, window, args.warmup, args.seconds)
                print(f"{r['rate']:>5.0f}  {r['window_ms']:>9}  {r['records']:>7}  {r['cpu_ms_per_1k']:>9}  "
                      f"{r['requests_per_record']:>10} ({r['fetch']} {r['produce']} {r['commit']})  "
                      f"{r['batch']:>5}  {r['lag_p50_ms']}/{r['lag_p99_ms']}", flush=True)


if __name__ == "__main__":
    main()
