"""Mode `route`: the Agent-Reach router (in this process) routing a burst across 15 instances of 3 capabilities.

Full path: decode the routing fields, filter + score every candidate, forward the original bytes to
the picked instance's inbox partition, write the ROUTED receipt, commit after both are acked.
Nothing consumes the inboxes (max_concurrency is unbounded, so no load shedding).
"""

from __future__ import annotations

from reach.bench import fleet
from reach.bench.progress import analyse_forwards, result, wait_outputs
from reach.bench.results import ModeResult, latency, own_cpu
from reach.bench.workspace import Workspace, envelopes, message_id
from reach.codec import decode_dict
from reach.envelopes import now_ms
from reach.records import Status
from reach.settings import ReachSettings
from reach.streams.router import Router


def run(ws: Workspace, *, messages: int, warmup: int, batch_size: int = 500, timeout: float = 180.0) -> ModeResult:
    regs = fleet.registrations(ws)
    inboxes = fleet.register(ws, regs)
    created: dict[str, int] = {}
    ws.burst(envelopes(ws, "route", "", list(fleet.CAPABILITIES), warmup + messages, created))
    router = Router(kafka=ws.kafka, reach=ReachSettings(namespace=ws.namespace, topics_file=ws.topics_file),
                    batch_size=batch_size)
    router.start(ready_timeout=60)
    try:
        progress = wait_outputs(ws, [ws.names.receipts], warmup=warmup, total=warmup + messages, cpu=own_cpu,
                                timeout=timeout, alive=router.healthy)
        live = len(router.state.live(now_ms()))
    finally:
        router.stop()
    if router.error is not None:
        raise RuntimeError(f"the router stopped: {router.error!r}")
    measured = {message_id("route", s) for s in range(warmup, warmup + messages)}
    routed: list[tuple[str, int]] = []
    hop: list[float] = []
    for rec in ws.read([ws.names.receipts]):
        receipt = decode_dict("Receipt", rec.value or b"")
        if receipt["status"] == Status.ROUTED.value:
            routed.append((receipt["message_id"], rec.timestamp))
            if receipt["message_id"] in measured:
                hop.append(receipt["at"] - created[receipt["message_id"]])
    throughput, _, lost, dup = analyse_forwards("route", routed, created, measured, basis="")
    forwards = [(r.key.decode(), r.timestamp) for r in ws.read(inboxes) if r.key]
    _, fwd_latency, fwd_lost, fwd_dup = analyse_forwards("route", forwards, created, measured,
                                                         basis="created_at -> inbox append (burst)")
    out = result("route", progress, (throughput, latency(hop, "created_at -> ROUTED receipt at (burst)"),
                                     max(lost, fwd_lost), max(dup, fwd_dup)), messages,
                 notes=f"router in this process; {live} live instances; CPU = the whole bench process")
    if fwd_latency is not None:
        out.steps["inbox"] = fwd_latency
    return out
