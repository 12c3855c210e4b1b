"""Offer N requests at R req/s to two `examples/echo_agent.py` instances behind `reach router`; count outcomes.

    .venv/bin/python scripts/load_check.py --requests 1500 --rate 100
    .venv/bin/python scripts/load_check.py --requests 3000 --rate 300
    .venv/bin/python scripts/load_check.py --agent tests.integration.slow_agent:agent --capability test.slow \
        --payload '{"slow": 1.0}' --requests 192 --rate 24

Needs a broker and Redis (REACH_BOOTSTRAP, REACH_REDIS_URL). Runs in a throwaway namespace; prints one
JSON line: outcomes by status (FAILED with kind OVERLOAD counted as OVERLOAD), the load average, and
the first OVERLOAD message if any (it names each candidate's occupancy, queue and drain rate), and
`idle_gap_ms_max`: the longest time an instance ran no handler while requests routed to it waited.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import TopicPartition

from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace
from reach.envelopes import new_envelope, now_ms
from reach.errors import InfraUnavailable
from reach.kafka import codec
from reach.tooling.local.process import free_port
from reach.records import TERMINAL, Receipt
from reach.registry import read_registry
from reach.settings import RedisSettings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # --agent may name a module of the repository (tests.integration.slow_agent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--agent", default="examples.echo_agent:agent", help="MODULE:ATTR of the agent to run")
    parser.add_argument("--capability", default="demo.echo")
    parser.add_argument("--payload", default='{"text": "hello"}', help="JSON object sent with each request")
    parser.add_argument("--verbose", action="store_true", help="also print the timeline of one non-COMPLETED request")
    args = parser.parse_args()

    ws = Workspace(topics_file=ROOT / "topics.yaml")
    env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
           "REACH_REDIS_URL": RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file),
           "REACH_WEB_PORT": str(free_port()), "PYTHONPATH": str(ROOT)}
    module, _, attr = args.agent.partition(":")
    agent_id = getattr(importlib.import_module(module), attr).agent_id
    ws.ensure(ws.names.capability(args.capability))
    ws.ensure(ws.names.inbox(agent_id), "agent")
    router = Child("router", ["reach", "router", "--interval", "5"], env)
    agents = [Child(f"agent{i}", ["reach", "agent", "run", args.agent, "--log-level", "WARNING"], env)
              for i in range(args.instances)]
    consumer = ws.consumer()
    try:
        def ready() -> bool:
            try:
                registry = read_registry(ws.kafka, ws.names)
            except InfraUnavailable:  # a topic just created may not be in the metadata yet
                return False
            live = [r for r in registry.live(now_ms()) if r.agent_id == agent_id]
            return len(live) == args.instances and sum(len(r.assigned_partitions) for r in live) == 8

        router.wait_until(ready, 120, f"{args.instances} READY instances of {agent_id}")
        meta = consumer.list_topics(ws.names.receipts, timeout=10).topics[ws.names.receipts]
        ends = [TopicPartition(ws.names.receipts, p, consumer.get_watermark_offsets(
            TopicPartition(ws.names.receipts, p), timeout=10)[1]) for p in meta.partitions]
        consumer.assign(ends)
        producer = ws.producer(**{"linger.ms": 2})
        topic = ws.names.capability(args.capability)
        payload = json.loads(args.payload)
        ids: set[str] = set()
        start = time.monotonic()
        for i in range(args.requests):
            ahead = start + i / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)  # open loop: the offered rate
            env_ = new_envelope(args.capability, {**payload, "n": i})
            producer.produce(topic, key=env_.message_id.encode(), value=codec.encode(env_))
            producer.poll(0)
            ids.add(env_.message_id)
        producer.flush(30)
        sent_s = time.monotonic() - start
        first: dict[str, Receipt] = {}
        timeline: dict[str, list[Receipt]] = {}
        deadline = time.monotonic() + 120
        while len(first) < len(ids) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                value = msg.value()
                if msg.error() or value is None:
                    continue
                receipt = codec.decode(value, Receipt)
                timeline.setdefault(receipt.message_id, []).append(receipt)
                if receipt.message_id in ids and receipt.status in TERMINAL and receipt.message_id not in first:
                    first[receipt.message_id] = receipt
        other = next((r for r in first.values() if r.status.value not in ("COMPLETED", "FAILED")), None)
        if other is not None and args.verbose:
            steps = sorted(timeline[other.message_id], key=lambda r: r.at)
            print([(r.status.value, r.instance_id, r.at - steps[0].at, r.error.code if r.error else None)
                   for r in steps])
        outcomes = Counter("OVERLOAD" if r.error and r.error.code == "OVERLOAD" else r.status.value
                           for r in first.values())
        overload = next((r for r in first.values() if r.error and r.error.code == "OVERLOAD"), None)
        print(json.dumps({
            "requests": args.requests, "offered_rps": args.rate, "sent_in_s": round(sent_s, 1),
            "instances": args.instances, "outcomes": dict(outcomes), "missing": len(ids) - len(first),
            "idle_gap_ms_max": idle_gap_ms([r for rs in timeline.values() for r in rs]),
            "loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()],
            "first_overload": None if overload is None else {
                "message": overload.error.message if overload.error else None,
                "retry_after_ms": overload.retry_after_ms},
        }))
    finally:
        consumer.close()
        for agent in agents:
            agent.stop()
        router.stop()
        ws.delete()  # a shared broker must not collect every run's topics


def idle_gap_ms(receipts: list[Receipt]) -> int:
    """The longest stretch an instance had no handler running while requests routed to it had not started."""
    longest = 0
    by_instance: dict[str, list[Receipt]] = {}
    for r in receipts:
        if r.instance_id and r.status.value in ("ROUTED", "STARTED", "COMPLETED"):
            by_instance.setdefault(r.instance_id, []).append(r)
    for steps in by_instance.values():
        queued = running = 0
        idle_since: int | None = None
        for r in sorted(steps, key=lambda r: (r.at, r.status.value != "COMPLETED")):
            if r.status.value == "ROUTED":
                queued += 1
            elif r.status.value == "STARTED":
                if idle_since is not None and queued > 0:
                    longest = max(longest, r.at - idle_since)
                queued, running, idle_since = max(queued - 1, 0), running + 1, None
            else:
                running = max(running - 1, 0)
                idle_since = r.at if running == 0 else None
    return longest


if __name__ == "__main__":
    main()
