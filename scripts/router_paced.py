"""The router alone at a paced rate on the real broker: its CPU per envelope and its batches per envelope.

The fleet of `reach bench --modes route` (15 instances of 3 capabilities, nothing reads their inboxes) is registered
in a throwaway namespace; one routing worker process (`Router`, as `reach router --no-faust` runs it) is started
from `--src` with `REACH_ROUTER_BATCH_WINDOW_MS=--window-ms`; envelopes are produced at `--rate` per second for
`--seconds`, spread over the capabilities. Measured: the worker process's CPU (utime + stime, librdkafka's threads
and its state loop included) from the first envelope until every one has its ROUTED receipt, per envelope; and the
worker's poll batches per envelope (each is one flush: the forwards, with each ROUTED receipt produced from its
forward's delivery report inside it; before decision 0063 two flushes), and the commits it sent per envelope (each
an OffsetCommit request; `--commit-every-s` sets the router's commit timer for the run, decision 0070). The broker
is shared, so its own request counters would mix in other clients: the router's batches and commits are counted in
the router.

    .venv/bin/python scripts/router_paced.py --rate 500 --seconds 10 [--window-ms 5] [--src DIR]
        [--commit-every-s 0.1]

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def child() -> None:
    """The routing worker: counts its batches, prints them as JSON when told to stop (SIGTERM)."""
    from reach.core import commits
    from reach.settings import KafkaSettings, ReachSettings, RedisSettings
    from reach.streams.router import route_loop
    from reach.streams.router.ports import NoHandoff
    from reach.streams.router.route_loop import Router

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    counts = {"batches": 0, "records": 0, "commits": 0}
    every = os.environ.get("ROUTER_PACED_COMMIT_EVERY_S")
    if every:
        route_loop.COMMIT_EVERY_S = float(every)
    take = commits.CommitLedger.take

    def counted(self: commits.CommitLedger, now: float) -> dict[tuple[str, int], int]:
        out = take(self, now)
        counts["commits"] += bool(out)  # one OffsetCommit request sent
        return out

    commits.CommitLedger.take = counted  # type: ignore[method-assign]

    def on_batch(n: int) -> None:
        counts["batches"] += 1
        counts["records"] += n

    worker = Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(), handoff=NoHandoff())
    if isinstance(getattr(worker, "metrics", None), list):  # the router on reach.kafka.worker (decision 0063)
        from reach.kafka.worker import BatchStats, WorkerMetrics

        class Count(WorkerMetrics):
            def batch(self, worker: str, stats: BatchStats) -> None:
                on_batch(stats.records)

        worker.metrics.append(Count())
    else:  # an older tree (--src): its own hook
        worker.on_batch = on_batch  # type: ignore[attr-defined]
    worker.start(ready_timeout=60)
    print("ready", flush=True)
    stop.wait()
    worker.stop()
    print(json.dumps(counts), flush=True)


class _Child:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        return "(see stderr)"


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--window-ms", type=float, default=0.0)
    parser.add_argument("--src", type=Path, default=None)
    parser.add_argument("--commit-every-s", type=float, default=None, help="the router's commit timer")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    from reach.envelopes import now_ms
    from reach.tooling.bench import fleet
    from reach.tooling.bench.route import _wait_assigned
    from reach.tooling.bench.workspace import Workspace, message_id

    ws = Workspace(topics_file=ROOT / "topics.yaml")
    fleet.register(ws, fleet.registrations(ws))
    src = (args.src or ROOT).resolve()
    env = {**os.environ, "PYTHONPATH": str(src), "REACH_NAMESPACE": ws.namespace,
           "REACH_BOOTSTRAP": ws.kafka.servers(), "REACH_TOPICS_FILE": str(ws.topics_file),
           "REACH_ROUTER_BATCH_WINDOW_MS": str(args.window_ms),
           **({"ROUTER_PACED_COMMIT_EVERY_S": str(args.commit_every_s)} if args.commit_every_s is not None else {})}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child"], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("the routing worker did not start")
        _wait_assigned(ws, [_Child(proc)], 1)  # type: ignore[list-item]
        sender = ws.sender()
        warm = ws.end_offsets([ws.names.receipts], ws.consumer())
        for cap in fleet.CAPABILITIES:  # one routed envelope per capability: the worker reads every topic
            sender.produce(ws.names.capability(cap), ws.envelope(message_id("warm", len(cap)), cap), key=cap)
        sender.flush(30)
        _routed(ws, warm, len(fleet.CAPABILITIES))
        receipts_start = ws.end_offsets([ws.names.receipts], ws.consumer())
        total = int(args.rate * args.seconds)
        before, started = cpu_s(proc.pid), time.monotonic()
        for seq in range(total):
            due = started + seq / args.rate
            while (wait := due - time.monotonic()) > 0:
                sender.poll(min(wait, 0.005))
            cap = fleet.CAPABILITIES[seq % len(fleet.CAPABILITIES)]
            mid = message_id("paced", seq)
            sender.produce(ws.names.capability(cap), ws.envelope(mid, cap, now_ms()), key=mid)
            sender.poll(0)
        sender.flush(30)
        routed = _routed(ws, receipts_start, total)
        used = cpu_s(proc.pid) - before
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    counts: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    ws.delete()
    print(json.dumps({
        "src": str(src), "rate": args.rate, "seconds": args.seconds, "window_ms": args.window_ms,
        "envelopes": total, "routed": routed,
        "cpu_us_per_envelope": round(used / total * 1e6, 1),
        "records_per_batch": round(counts["records"] / max(counts["batches"], 1), 2),
        "batches_per_envelope": round(counts["batches"] / max(counts["records"], 1), 3),
        "commits_per_envelope": round(counts.get("commits", 0) / max(counts["records"], 1), 3),
        "commit_every_s": args.commit_every_s,
        "load_avg_1m": round(os.getloadavg()[0], 2)}))


def _routed(ws: Any, start: dict[tuple[str, int], int], count: int, timeout: float = 60.0) -> int:
    """Wait until `count` ROUTED receipts are on the receipts topic after `start`; how many there are."""
    from reach.kafka.codec import decode_dict
    from reach.records import Status

    deadline = time.monotonic() + timeout
    while True:
        routed = {rec.key for rec in ws.read([ws.names.receipts], start=start)
                  if decode_dict("Receipt", rec.value or b"")["status"] == Status.ROUTED.value}
        if len(routed) >= count or time.monotonic() > deadline:
            return len(routed)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
