"""CPU per message of the agent SDK with a no-op handler (one `reach agent run` process, no router).

N envelopes go straight into the no-op agent's inbox; the agent's CPU (utime + stime from /proc) is read when
all N COMPLETED receipts are on the receipts topic, minus its idle CPU over the same wall time.

    eval $(.venv/bin/reach local up) && .venv/bin/python scripts/agent_cost.py --messages 20000 [--src DIR]

`--src DIR` runs the agent from another source tree (e.g. `git archive <commit> | tar -x -C DIR`), for a
before/after comparison with the same driver.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import TopicPartition  # noqa: E402

from reach.tooling.bench import noop_agent  # noqa: E402
from reach.tooling.bench.subprocesses import Child  # noqa: E402
from reach.tooling.bench.workspace import Workspace, message_id  # noqa: E402
from reach.envelopes import now_ms  # noqa: E402
from reach.kafka import codec  # noqa: E402
from reach.records import Receipt, Status  # noqa: E402
from reach.registry import read_registry  # noqa: E402
from reach.settings import RedisSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured before the burst")
    parser.add_argument("--src", type=Path, default=None, help="run the agent from this source tree")
    args = parser.parse_args()
    ws = Workspace(topics_file=ROOT / "topics.yaml")
    inbox = ws.ensure(ws.names.inbox(noop_agent.AGENT_ID), "agent")
    env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
           "REACH_REDIS_URL": RedisSettings().url(), "REACH_TOPICS_FILE": str(ws.topics_file)}
    if args.src:
        env["PYTHONPATH"] = str(args.src.resolve())
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
        cpu0, t0 = agent.cpu(), time.monotonic()
        ws.burst((inbox, mid, ws.envelope(mid, noop_agent.CAPABILITY))
                 for mid in (message_id("cost", i) for i in range(args.messages)))
        done: set[str] = set()
        deadline = time.monotonic() + 600
        while len(done) < args.messages and time.monotonic() < deadline and agent.alive():
            for msg in receipts.consume(1_000, 0.5):
                if msg.error() is None and msg.value():
                    receipt = codec.decode(msg.value() or b"", Receipt)
                    if receipt.status is Status.COMPLETED:
                        done.add(receipt.message_id)
        cpu, wall = agent.cpu() - cpu0, time.monotonic() - t0
        receipts.close()
    finally:
        agent.stop()
        ws.delete()
    net = max(0.0, cpu - idle_rate * wall)
    print(json.dumps({
        "messages": args.messages, "completed": len(done), "wall_s": round(wall, 2),
        "agent_cpu_s": round(cpu, 2), "idle_cpu_per_s": round(idle_rate, 4),
        "cpu_us_per_msg": round(net / max(1, len(done)) * 1e6, 1),
        "msgs_per_s": round(len(done) / wall, 1), "loadavg": os.getloadavg(),
        "src": str(args.src) if args.src else "worktree",
    }))


if __name__ == "__main__":
    main()
