"""Where a live request's time goes: send at a fixed rate, then read each message's receipts back.

    eval $(.venv/bin/reach local up) && export REACH_NAMESPACE=lat$RANDOM && .venv/bin/reach topics apply
    .venv/bin/reach router &  .venv/bin/reach agent run reach.tooling.bench.noop_agent:agent &
    .venv/bin/python scripts/hop_latency.py bench.noop 200 3000

Prints p50/p99 of created -> COMPLETED and of each hop (created -> ROUTED -> STARTED -> COMPLETED),
the 15 slowest requests with their send time, and the slowest routing hop per half second, which
shows periodic stalls (a GC pause, a blocking call on the routing thread) as spikes.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict

from confluent_kafka import TopicPartition
from ulid import ULID

from reach.client import Client
from reach.kafka import clients, codec
from reach.kafka.topicreader import open_reader, start_offsets
from reach.names import Names
from reach.records import Receipt
from reach.settings import KafkaSettings


def quantile(values: list[int], q: float) -> int | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def main(capability: str, rate: float, count: int) -> None:
    names = Names(os.environ.get("REACH_NAMESPACE", "reach"))
    client = Client()
    t0 = int(time.time() * 1000)
    ids = []
    start = time.monotonic()
    for i in range(count):
        wait = start + i / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        ids.append(client.send(capability, {"n": i}))
    reader = open_reader("hop-latency", KafkaSettings())
    starts = start_offsets(reader, names.receipts, t0)
    reader.assign([TopicPartition(names.receipts, p, o) for p, o in starts.items()])
    steps: dict[str, dict[str, int]] = {}
    idle = time.monotonic() + 5
    while time.monotonic() < idle:
        for msg in clients.take(reader, 1000, 0.5):
            if msg.error() or not msg.value():
                continue
            receipt = codec.decode(msg.value() or b"", Receipt)
            steps.setdefault(receipt.message_id, {}).setdefault(receipt.status.value, receipt.at)
            idle = time.monotonic() + 3
    reader.close()
    done = []
    hops: dict[str, list[int]] = {"created->ROUTED": [], "ROUTED->STARTED": [], "STARTED->COMPLETED": []}
    for mid in ids:
        seen = steps.get(mid, {})
        if "COMPLETED" not in seen:
            continue
        created = ULID.from_str(mid).milliseconds
        done.append((seen["COMPLETED"] - created, created, seen))
        if "ROUTED" in seen:
            hops["created->ROUTED"].append(seen["ROUTED"] - created)
        if "ROUTED" in seen and "STARTED" in seen:
            hops["ROUTED->STARTED"].append(seen["STARTED"] - seen["ROUTED"])
        if "STARTED" in seen:
            hops["STARTED->COMPLETED"].append(seen["COMPLETED"] - seen["STARTED"])
    totals = [t for t, _, _ in done]
    print(f"completed {len(done)} of {count}; created->COMPLETED p50 {quantile(totals, .5)} ms "
          f"p99 {quantile(totals, .99)} ms max {max(totals, default=None)} ms")
    for hop, values in hops.items():
        print(f"  {hop:20} p50 {quantile(values, .5)} ms  p99 {quantile(values, .99)} ms")
    for total, created, seen in sorted(sorted(done, reverse=True)[:15], key=lambda d: d[1]):
        print(f"  slow: sent at {(created - t0) / 1000:7.2f} s, {total} ms "
              f"(routed after {seen.get('ROUTED', created) - created} ms)")
    per: dict[int, list[int]] = defaultdict(list)
    for _, created, seen in done:
        per[(created - t0) // 500].append(seen.get("ROUTED", created) - created)
    print("slowest routing hop per 0.5 s:", " ".join(str(max(v)) for _, v in sorted(per.items())))


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]))
