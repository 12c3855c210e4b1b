"""Mode `route`: routing workers (`reach.streams.router.route_loop.Router`, one process each) routing a burst across 15
instances of 3 capabilities.

Full path: decode the routing fields, filter + score every candidate, forward the original bytes to
the picked instance's inbox partition, write the ROUTED receipt, commit after both are acked.
Nothing consumes the inboxes (max_concurrency is unbounded, so no load shedding). With two workers
they share the 12 capability partitions; the burst is produced once every worker holds its share, so
no rebalance falls inside the measurement.
"""

from __future__ import annotations

import time

from reach.kafka.codec import decode_dict
from reach.records import Status
from reach.streams.router.route_loop import router_group
from reach.tooling.bench import cpu, fleet
from reach.tooling.bench.progress import analyse_forwards, result, wait_outputs
from reach.tooling.bench.results import ModeResult, latency
from reach.tooling.bench.round_trip import workers_cpu
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace, envelopes, message_id


def mode_name(workers: int) -> str:
    return "route" if workers == 1 else f"route {workers} workers"


def run(ws: Workspace, *, messages: int, warmup: int, batch_size: int = 500, workers: int = 1,
        timeout: float = 180.0) -> ModeResult:
    mode = mode_name(workers)
    prefix = "route" if workers == 1 else f"route{workers}w"
    inboxes = fleet.register(ws, fleet.registrations(ws))
    created: dict[str, int] = {}
    receipts_start, inbox_start = _ends(ws, [ws.names.receipts]), _ends(ws, inboxes)
    env = {"REACH_NAMESPACE": ws.namespace, "REACH_BOOTSTRAP": ws.kafka.servers(),
           "REACH_TOPICS_FILE": str(ws.topics_file)}
    children = [Child(f"router{i + 1}", ["reach.tooling.bench.route_worker", str(batch_size)], env)
                for i in range(workers)]
    labels: dict[str, int | None] = {(f"router {i + 1}" if workers > 1 else "router"): c.pid
                                     for i, c in enumerate(children)}
    labels["broker JVM"] = cpu.broker_pid(ws.kafka.servers())
    try:
        _wait_assigned(ws, children, workers)
        burst = list(envelopes(ws, prefix, "", list(fleet.CAPABILITIES), warmup + messages, created))
        before = cpu.read(labels)  # the whole burst, warm-up included: a tiny burst is routed before any sample
        ws.burst(burst)
        progress = wait_outputs(ws, [ws.names.receipts], warmup=warmup, total=warmup + messages, cpu=lambda: 0.0,
                                timeout=timeout, alive=lambda: all(c.alive() for c in children),
                                start=receipts_start)
        per_process = cpu.per_1k(before, cpu.read(labels), warmup + messages)
        if not progress.done and not all(c.alive() for c in children):
            raise RuntimeError(f"a routing worker exited:\n{next(c.tail() for c in children if not c.alive())}")
    finally:
        for child in children:
            child.stop()
    measured = {message_id(prefix, s) for s in range(warmup, warmup + messages)}
    routed: list[tuple[str, int]] = []
    hop: list[float] = []
    for rec in ws.read([ws.names.receipts], start=receipts_start):
        receipt = decode_dict("Receipt", rec.value or b"")
        if receipt["status"] == Status.ROUTED.value and receipt["message_id"] in created:
            routed.append((receipt["message_id"], rec.timestamp))
            if receipt["message_id"] in measured:
                hop.append(receipt["at"] - created[receipt["message_id"]])
    throughput, _, lost, dup = analyse_forwards(mode, routed, created, measured, basis="")
    forwards = [(r.key.decode(), r.timestamp) for r in ws.read(inboxes, start=inbox_start) if r.key]
    _, fwd_latency, fwd_lost, fwd_dup = analyse_forwards(mode, forwards, created, measured,
                                                         basis="created_at -> inbox append (burst)")
    out = result(mode, progress, (throughput, latency(hop, "created_at -> ROUTED receipt at (burst)"),
                                  max(lost, fwd_lost), max(dup, fwd_dup)), messages,
                 notes=f"{workers} routing worker process(es), {len(fleet.registrations(ws))} instances; "
                       "CPU = the workers' processes over the whole burst")
    out.cpu_by_process = per_process
    out.cpu_per_1k = workers_cpu(per_process, set(labels) - {"broker JVM"})
    if fwd_latency is not None:
        out.steps["inbox"] = fwd_latency
    return out


def _wait_assigned(ws: Workspace, children: list[Child], workers: int, timeout: float = 90.0) -> None:
    """Until the routing group is stable with `workers` members that each hold capability partitions."""
    group = router_group(ws.names)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in children:
            if not child.alive():
                raise RuntimeError(f"a routing worker exited before joining:\n{child.tail()}")
        try:
            desc = ws.admin.describe_consumer_groups([group])[group].result(timeout=10)
            members = [m for m in desc.members if m.assignment and m.assignment.topic_partitions]
            if str(desc.state).endswith("STABLE") and len(members) == workers:
                return
        except Exception:  # noqa: BLE001, S110 - the group does not exist until the first worker joins
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{workers} routing worker(s) did not share the capability partitions within {timeout:.0f}s")


def _ends(ws: Workspace, topic_names: list[str]) -> dict[tuple[str, int], int]:
    consumer = ws.consumer()
    try:
        return ws.end_offsets(topic_names, consumer)
    finally:
        consumer.close()
