"""CPU per message of the agent SDK with a no-op handler (one `reach agent run` process, no router).

N envelopes go straight into the no-op agent's inbox; the agent's CPU (utime + stime from /proc) is read when
all N COMPLETED receipts are on the receipts topic, minus its idle CPU over the same wall time.

    eval $(.venv/bin/reach local up) && .venv/bin/python scripts/agent_cost.py --messages 20000 [--src DIR]

`--src DIR` runs the agent from another source tree (e.g. `git archive <commit> | tar -x -C DIR`), for a
before/after comparison with the same driver. `--rate N` sends N envelopes a second instead of one burst. The
offset commits the agent's group wrote meanwhile are read back from `__consumer_offsets`: `commits_per_msg`
counts OffsetCommit requests (the records of one request share its commit timestamp), `offset_records_per_msg`
one record per partition a commit carries.

In a fresh namespace every envelope was created before Redis's memory of the namespace began (its mark is written
at the first claim), so the agent asks the status table for each one (reach.core.retention.began_after); no
status view runs here, so that is a refused connection and a warning per message. `--namespace-in-use` writes
the mark in the past first, as a namespace in use has it.

`--redis-trips` counts the agent's Redis round trips and commands per message (scripts/redis_trips: every write
of redis-py's asyncio connections, one command or one whole pipeline, is one round trip; it wraps redis-py, so
"before" trees are counted the same way), and the garbage collector's runs and µs per message by
generation; with `--kafka-requests` also the agent's Kafka requests per message by API (`kafka_Produce_per_msg`,
`kafka_Fetch_per_msg`, `kafka_OffsetCommit_per_msg`, ...: its own clients' count, where the broker's counts every
client). `receipts_per_msg` is every receipt on the receipts topic (STARTED,
COMPLETED, ...) divided by the messages.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from redis import Redis  # noqa: E402

from reach.agent.memorymark import mark_key  # noqa: E402
from reach.envelopes import now_ms  # noqa: E402
from reach.kafka import codec  # noqa: E402
from reach.records import Receipt, Status  # noqa: E402
from reach.registry import read_registry  # noqa: E402
from reach.settings import RedisSettings  # noqa: E402
from reach.tooling.bench import noop_agent  # noqa: E402
from reach.tooling.bench.subprocesses import Child  # noqa: E402
from reach.tooling.bench.workspace import Workspace, message_id  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured before the burst")
    parser.add_argument("--src", type=Path, default=None, help="run the agent from this source tree")
    parser.add_argument("--rate", type=float, default=None, help="envelopes a second (default: one burst)")
    parser.add_argument("--namespace-in-use", action="store_true",
                        help="Redis's memory of the namespace began before the envelopes (no status table asks)")
    parser.add_argument("--redis-trips", action="store_true",
                        help="count the agent's Redis round trips and commands (scripts/redis_trips)")
    parser.add_argument("--kafka-requests", action="store_true",
                        help="with --redis-trips: count the agent's Kafka requests by API (librdkafka's statistics)")
    args = parser.parse_args()
    ws = Workspace(topics_file=ROOT / "topics.yaml")
    inbox = ws.ensure(ws.names.inbox(noop_agent.AGENT_ID), "agent")
    if args.namespace_in_use:
        with Redis.from_url(RedisSettings().url()) as redis:
            redis.set(mark_key(ws.namespace), "1")
    env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
           "REACH_REDIS_URL": RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file)}
    path = [str(args.src.resolve())] if args.src else []
    trips_dir = tempfile.mkdtemp(prefix="reach-trips-") if args.redis_trips else None
    trips_file = None
    if trips_dir is not None:
        trips_file = os.path.join(trips_dir, "trips.json")
        env["REACH_COST_REDIS_TRIPS"] = trips_file
        if args.kafka_requests:
            env["REACH_COST_KAFKA_REQUESTS"] = "1"
        path.insert(0, str(ROOT / "scripts" / "redis_trips"))
    if path:
        env["PYTHONPATH"] = os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    agent = Child("agent", ["reach", "agent", "run", "reach.tooling.bench.noop_agent:agent"], env)
    try:
        agent.wait_until(lambda: any(r.assigned_partitions for r in read_registry(ws.kafka, ws.names).live(now_ms())),
                         90, "READY with partitions")
        idle0 = agent.cpu()
        time.sleep(args.idle)  # the idle baseline: heartbeats and polling, no messages
        idle_rate = (agent.cpu() - idle0) / args.idle
        receipts = ws.consumer()
        meta = receipts.list_topics(ws.names.receipts, timeout=10).topics[ws.names.receipts]
        receipts.assign([TopicPartition(ws.names.receipts, p, 0) for p in meta.partitions])
        offsets = ws.consumer()
        start = _ends(offsets, OFFSETS_TOPIC)
        trips0 = _trips(trips_file)
        cpu0, t0 = agent.cpu(), time.monotonic()
        items = ((inbox, mid, ws.envelope(mid, noop_agent.CAPABILITY))
                 for mid in (message_id("cost", i) for i in range(args.messages)))
        if args.rate:
            _paced(ws.producer(), items, args.rate)
        else:
            ws.burst(items)
        done: set[str] = set()
        seen = 0
        deadline = time.monotonic() + 600
        while len(done) < args.messages and time.monotonic() < deadline and agent.alive():
            for msg in receipts.consume(1_000, 0.5):
                if msg.error() is None and msg.value():
                    seen += 1
                    receipt = codec.decode(msg.value() or b"", Receipt)
                    if receipt.status is Status.COMPLETED:
                        done.add(receipt.message_id)
        cpu, wall = agent.cpu() - cpu0, time.monotonic() - t0
        time.sleep(0.5 if trips_file else 0)  # the counter's file is written every 0.2 s
        trips1 = _trips(trips_file)
        receipts.close()
        commits, records = _commits(offsets, start, ws.names.agent_group(noop_agent.AGENT_ID))
        offsets.close()
    finally:
        agent.stop()
        ws.delete()
        if trips_dir is not None:
            shutil.rmtree(trips_dir, ignore_errors=True)
    net = max(0.0, cpu - idle_rate * wall)
    print(json.dumps({
        "messages": args.messages, "completed": len(done), "wall_s": round(wall, 2),
        "agent_cpu_s": round(cpu, 2), "idle_cpu_per_s": round(idle_rate, 4),
        "cpu_us_per_msg": round(net / max(1, len(done)) * 1e6, 1),
        "msgs_per_s": round(len(done) / wall, 1), "rate": args.rate,
        "commits_per_msg": round(commits / max(1, len(done)), 3),
        "offset_records_per_msg": round(records / max(1, len(done)), 3), "loadavg": os.getloadavg(),
        "receipts_per_msg": round(seen / max(1, len(done)), 3),
        **({f"{'' if k.startswith(('gc', 'kafka')) else 'redis_'}{k}_per_msg": round((trips1[k] - trips0.get(k, 0))
                                                                         / max(1, len(done)), 3) for k in trips1}
           if trips_file else {}),
        "namespace_in_use": args.namespace_in_use, "src": str(args.src) if args.src else "worktree",
    }))


OFFSETS_TOPIC = "__consumer_offsets"


def _trips(path: str | None) -> dict[str, int]:
    """The agent's Redis round trips and commands so far (written by scripts/redis_trips/sitecustomize.py)."""
    if path is None:
        return {}
    with open(path) as counts:
        return dict(json.load(counts))


def _paced(producer: Producer, items: Iterable[tuple[str, str, bytes]], rate: float) -> None:
    """Produce one record every 1/rate s, on a schedule (a late record does not push the next ones back)."""
    start = time.monotonic()
    for n, (topic, key, value) in enumerate(items):
        wait = start + n / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)  # not poll(wait): it returns at the first delivery report
        producer.produce(topic, key=key.encode(), value=value)
        producer.poll(0)
    producer.flush(60)


def _ends(consumer: Consumer, topic: str) -> dict[int, int]:
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
            for p in meta.partitions}


def _commits(consumer: Consumer, start: dict[int, int], group: str) -> tuple[int, int]:
    """(requests, records): the offset commits of `group` on __consumer_offsets since `start` (key: version 0 or
    1, then the group)."""
    end = _ends(consumer, OFFSETS_TOPIC)
    todo = {p for p, o in end.items() if o > start.get(p, 0)}
    consumer.assign([TopicPartition(OFFSETS_TOPIC, p, start.get(p, 0)) for p in todo])
    name, count, requests = group.encode(), 0, set()
    while todo:
        batch = consumer.consume(1_000, 2.0)
        if not batch:
            break
        for msg in batch:
            key = msg.key() or b""
            if msg.error() is None and len(key) > 4 and struct.unpack(">h", key[:2])[0] in (0, 1):
                (size,) = struct.unpack(">h", key[2:4])
                if key[4:4 + size] == name:
                    count += 1
                    requests.add((msg.partition(), msg.timestamp()[1]))
            if (msg.offset() or 0) + 1 >= end[msg.partition() or 0]:
                todo.discard(msg.partition() or 0)
    return len(requests), count


if __name__ == "__main__":
    main()
