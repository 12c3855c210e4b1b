"""CPU per receipt of the usage counter's decode, in process: the old path (fastavro into a `Receipt` model) against
`reach.streams.usage.counter.with_usage` (the generated reader, a model only for a receipt carrying usage).

    .venv/bin/python scripts/usage_decode_cost.py [--n 20000] [--repeats 5]

A no-op agent's COMPLETED (no usage) and the same with a `usage` record; best of `--repeats` runs of `--n` decodes
each, `time.process_time()`. Prints one JSON line (decision 0070).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from reach.kafka import codec
    from reach.records import Receipt, Status, Usage
    from reach.streams.usage.counter import with_usage

    def receipt(usage: Usage | None) -> bytes:
        return codec.encode(Receipt(
            message_id="01JCOST00000000000000000001", trace_id="trace-1", tenant="bench", capability="bench.noop",
            status=Status.COMPLETED, at=1_767_000_000_005, agent_id="agent://bench/noop", instance_id="inst-0",
            result=b'{"ok": true}', timings={"run_ms": 0, "started_at": 1_767_000_000_002}, usage=usage))

    def cpu_us(decode: Callable[[bytes], Any], data: bytes) -> float:
        best = float("inf")
        for _ in range(args.repeats):
            started = time.process_time()
            for _ in range(args.n):
                decode(data)
            best = min(best, (time.process_time() - started) / args.n * 1e6)
        return round(best, 2)

    plain = receipt(None)
    used = receipt(Usage(input_tokens=10, output_tokens=5, model="m", cost_micros=20, currency="USD"))
    model = lambda data: codec.decode(data, Receipt)  # noqa: E731 - the counter's decoder before decision 0070
    print(json.dumps({"no_usage_model_us": cpu_us(model, plain), "no_usage_with_usage_us": cpu_us(with_usage, plain),
                      "usage_model_us": cpu_us(model, used), "usage_with_usage_us": cpu_us(with_usage, used),
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
    main()
