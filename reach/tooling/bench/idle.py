"""Mode `idle`: what the stack costs with no traffic at all — the stream app, one no-op agent and the broker.

Every consumer's empty fetches, heartbeats, listings and timers cost CPU whether requests flow or not; this
row shows that floor (a percentage of one core per process over `seconds`, after `settle` seconds for
start-up to finish), so a change that trades latency for idle polling shows up.
"""

from __future__ import annotations

import time

from reach.tooling.bench import cpu, round_trip
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.workspace import Workspace

IDLE = ("router", "agent", "broker JVM")


def run(ws: Workspace, *, seconds: float = 30.0, settle: float = 10.0) -> ModeResult:
    """The stack of the round trip (one no-op agent), left alone for `seconds`."""
    with round_trip.stream_app(ws) as app, round_trip.stack(ws, app, round_trip.NOOP) as running:
        time.sleep(settle)
        processes = {label: pid for label, pid in running.processes().items() if label != "bench"}
        before, started = cpu.read(processes), time.monotonic()
        time.sleep(seconds)
        after, elapsed = cpu.read(processes), time.monotonic() - started
    shares = percent_of_a_core(before, after, elapsed)
    known = [shares.get(label) for label in IDLE]
    total = None if any(v is None for v in known) else round(sum(v for v in known if v is not None), 2)
    return ModeResult(mode="idle", messages=0, throughput=0.0, latency=None, cpu_per_1k=None, lost=0, duplicated=0,
                      figures={"cpu_pct_of_a_core": total, **{f"cpu_pct {k}": v for k, v in shares.items()}},
                      notes=f"idle {seconds:g}s: " + ", ".join(f"{k} {'n/a' if v is None else f'{v:.1f}%'}"
                                                               for k, v in sorted(shares.items()))
                      + f"; router + agent + broker {'n/a' if total is None else f'{total:.1f}%'} of one core")


def percent_of_a_core(before: cpu.Reading, after: cpu.Reading, elapsed: float) -> dict[str, float | None]:
    """Per process, its CPU time between two readings as a percentage of one core over `elapsed` seconds.
    A process that spawned children (the router's group-admin child) counts them under its own label."""
    seconds = cpu.spent(before, after)
    out = {label: s for label, s in seconds.items() if "/" not in label}
    for label, s in seconds.items():
        top = label.split("/", 1)[0]
        if top != label and s is not None and out.get(top) is not None:
            out[top] = (out[top] or 0.0) + s
    return {label: None if s is None or elapsed <= 0 else round(s / elapsed * 100, 2) for label, s in out.items()}
