"""CPU per receipt of the health writer's fold, in process, without a broker: decode + fold + the publish tick.

N messages' receipts of a realistic mix (per message: ROUTED, STARTED, then COMPLETED with run_ms, or
ATTEMPT_FAILED for a sick share) over `--instances` instances are encoded first; the timed part is what the
writer does per receipt: ROUTED is skipped by its router header (not decoded), the others go through
`codec.decode_dict` + `HealthTable.fold`, and `HealthTable.due` runs every 250 ms of receipt time.

    .venv/bin/python scripts/health_cost.py --messages 50000 --instances 20
"""

from __future__ import annotations

import argparse
import json
import random
import time

from reach.core.healthmodel.table import HealthTable
from reach.kafka import codec
from reach.records import Decision, ErrorInfo, Receipt, Status
from reach.settings import HealthEnvSettings


def receipts(messages: int, instances: int, sick_share: float, rate: float) -> list[tuple[bool, bytes]]:
    """(from a router, bytes) per receipt, in the order they are produced."""
    rng = random.Random(7)
    out = []
    for n in range(messages):
        at = 1_000_000 + int(n * 1000 / rate)
        instance = f"host-{n % instances}"
        common = {"message_id": f"m{n}", "trace_id": "t", "tenant": "d", "capability": "demo.echo",
                  "agent_id": "agent://demo/echo", "instance_id": instance}
        out.append((True, codec.encode(Receipt(**common, status=Status.ROUTED, at=at,
                                               decision=Decision(picked_instance=instance)))))
        out.append((False, codec.encode(Receipt(**common, status=Status.STARTED, at=at + 1))))
        if n % instances == 0 and rng.random() < sick_share:
            out.append((False, codec.encode(Receipt(**common, status=Status.ATTEMPT_FAILED, at=at + 3, error=ErrorInfo(
                kind="TRANSIENT", code="SICK", message="sick")))))
        else:
            out.append((False, codec.encode(Receipt(**common, status=Status.COMPLETED, at=at + 3,
                                                    timings={"run_ms": rng.randint(2, 40)}))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--sick-share", type=float, default=0.5, help="failure share of one instance")
    parser.add_argument("--rate", type=float, default=2_000.0, help="messages per second of receipt time")
    args = parser.parse_args()
    values = receipts(args.messages, args.instances, args.sick_share, args.rate)
    table = HealthTable(HealthEnvSettings())
    published = 0
    next_tick = 0
    started_cpu, started_wall = time.process_time(), time.perf_counter()
    for routed, value in values:
        if routed:
            continue  # the writer skips it by its header
        receipt = codec.decode_dict("Receipt", value)
        table.fold(receipt)
        at = receipt["at"]
        if at >= next_tick:
            published += len(table.due(at))
            next_tick = at + 250
    cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started_wall
    print(json.dumps({"receipts": len(values), "instances": args.instances, "calls": table.calls,
                      "records_published": published, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
                      "us_per_receipt": round(cpu / len(values) * 1e6, 2),
                      "receipts_per_cpu_s": round(len(values) / cpu)}))


if __name__ == "__main__":
    main()
