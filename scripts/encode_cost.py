"""CPU per receipt of the receipt encoders, in process: the agent's STARTED, its outcomes, the router's ROUTED.

Each case encodes N receipts (`time.process_time()`, best of `--repeats`), the model or the arguments built once
outside the timing: what is timed is the encoder alone.

    .venv/bin/python scripts/encode_cost.py [--n 20000] [--repeats 3] [--src DIR]

Cases: `started` (`reach.receipts.started_bytes`, the agent's STARTED), `completed` (`receiptbytes.encode_receipt`
of a COMPLETED model with a result and timings), `completed_usage` (the same with a `usage` record: a nested record),
`routed` (the router's `RoutedReceiptWriter.encode`, three candidates), `routed_generated` (where it exists: the
generated writer on the dict `as_receipt` builds for the same ROUTED receipt, the dict's building included) and
`fastavro_*` (`codec.encode` of the same models: the reference); `decode_*`: reading those receipts back as the
status fold does (`receiptbytes.decode_receipt` where the tree has it, else `codec.decode_dict`). `--src DIR`
runs the encoders of another source tree (e.g. main), for a before/after comparison with the same driver.
Prints one JSON line.
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

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--src", type=Path, default=None, help="run the encoders from this source tree")
    args = parser.parse_args()
    sys.path[:0] = [str((args.src or ROOT).resolve())]
    import reach

    result = {name: round(best(run, args.n, args.repeats), 2) for name, run in cases().items()}
    print(json.dumps({"src": str(Path(reach.__file__).parents[1]), "n": args.n, "us_per_receipt": result,
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


def best(run: Callable[[], object], n: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.process_time()
        for _ in range(n):
            run()
        times.append(time.process_time() - started)
    return min(times) / n * 1e6


def cases() -> dict[str, Callable[[], object]]:
    from reach.kafka import codec
    from reach.kafka.receiptbytes import encode_receipt
    from reach.receipts import receipt_for, started_bytes
    from reach.records import Envelope, Status, StepStatus, Usage
    from reach.streams.router.routed_receipt import RoutedReceiptWriter, _sample

    envelope = Envelope(message_id="01JCOST00000000000000000001", trace_id="trace-1", tenant="bench", source="bench",
                        capability="demo.echo", payload=b"{}", created_at=1_767_000_000_000,
                        deadline=1_767_000_030_000, delivery_timeout_ms=10_000)
    completed = receipt_for(envelope, Status.COMPLETED, agent_id="agent://demo/echo", instance_id="i0",
                            step_status=StepStatus.OK, result=b'{"echo": "hello"}', timings={"run_ms": 3})
    with_usage = completed.model_copy(update={"usage": Usage(input_tokens=120, output_tokens=40, model="m")})
    routed_writer = RoutedReceiptWriter.create()
    routed: dict[str, Any] = _sample()
    assert routed_writer is not None
    out: dict[str, Callable[[], object]] = {}
    try:  # the generated writer (not in trees before it): a ROUTED receipt from the dict the codec would take
        from reach.kafka.receiptbytes import ReceiptWriter
        from reach.streams.router.routed_receipt import as_receipt
    except ImportError:
        pass
    else:
        generated = ReceiptWriter.create()
        assert generated is not None
        out["routed_generated"] = lambda: generated.encode_dict(as_receipt(**routed))
    from reach.kafka import receiptbytes

    read = getattr(receiptbytes, "decode_receipt", None) or (lambda data: codec.decode_dict("Receipt", data))
    raw, raw_usage = codec.encode(completed), codec.encode(with_usage)
    out["decode_completed"] = lambda: read(raw)
    out["decode_completed_usage"] = lambda: read(raw_usage)
    return {
        **out,
        "started": lambda: started_bytes(envelope, agent_id="agent://demo/echo", instance_id="i0"),
        "completed": lambda: encode_receipt(completed),
        "completed_usage": lambda: encode_receipt(with_usage),
        "routed": lambda: routed_writer.encode(**routed),
        "fastavro_completed": lambda: codec.encode(completed),
        "fastavro_completed_usage": lambda: codec.encode(with_usage),
    }


if __name__ == "__main__":
    main()
