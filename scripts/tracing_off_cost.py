"""CPU per call of Reach's span helpers with tracing off (no SDK installed): the router's forward headers and the
client's trace headers, beside what the same step cost before spans existed (docs/performance.md, "Tracing off").

    PYTHONPATH=. .venv/bin/python scripts/tracing_off_cost.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

from reach import tracing
from reach.envelopes import new_envelope

CALLS = 200_000


class Record:
    """A consumed record as the router holds it, with a traceparent header."""

    def __init__(self) -> None:
        self.raw_headers = [("traceparent", b"00-" + b"1" * 32 + b"-" + b"2" * 16 + b"-01")]
        self.topic, self.partition, self.offset = "ns.cap.a.b", 0, 1


def cpu_ns(call: Callable[[], object]) -> float:
    """Best of five: CPU ns per call (process time, so a loaded machine's waiting is not counted)."""
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(CALLS):
            call()
        best = min(best, (time.process_time() - start) / CALLS * 1e9)
    return best


def main() -> None:
    assert not tracing.on(), "an SDK is installed: unset OTEL_* to measure tracing off"
    envelope = new_envelope("a.b", {"x": 1})
    fields, record = envelope.model_dump(), Record()
    rows = [("tracing.routed(...) (the router's forward headers)", lambda: tracing.routed(
                record, fields, object(), since=0.0)),
            ("record.raw_headers (what the forward passed before)", lambda: record.raw_headers),
            ("tracing.inject(envelope, topic=...) (Client.outbound)", lambda: tracing.inject(envelope, topic="t")),
            ("tracing.inject(envelope) (what it called before)", lambda: tracing.inject(envelope))]
    for name, call in rows:
        print(f"{cpu_ns(call):8.0f} ns  {name}")


if __name__ == "__main__":
    main()
