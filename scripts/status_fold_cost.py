"""CPU per receipt of the status fold's batch path (`StatusFold._batch`), in process, with real RocksDB stores.

Each request is the router's ROUTED (a decision with two candidates, the caller's reply_to header), the agent's
STARTED and its COMPLETED (a small JSON result), encoded by the real codec. The fold's consumer and producer are the
in-memory fakes of the unit tests (tests/unit/streams/kafka_fakes.py): what is measured is decoding, folding, the
metrics, the row JSON and the store writes, not the broker. `time.process_time()` around each `_batch` call.

    .venv/bin/python scripts/status_fold_cost.py [--requests 10000] [--batch 100] [--shape pipelined] [--src DIR]
        [--no-started] [--repeats 1]

Shapes: `pipelined` (default): a batch holds the ROUTED of one group of requests, the STARTED of the group before
and the COMPLETED of the one before that, so every receipt reads its row from the store and writes it back, as
under steady load; `together`: a request's three receipts in one batch (one row write per request, the shape of
docs/decisions/0044's figures). `--src DIR` runs the fold from another source tree (e.g. `git archive <commit> |
tar -x -C DIR`), for a before/after comparison with the same driver. `--no-started`: a request's run skipped its
STARTED receipt (its COMPLETED carries `started_at`, docs/decisions/0055), two receipts a request. `--repeats N`: the
fold run N times on fresh stores, the best kept. Besides CPU, it counts per request the receipts decoded
(`receiptbytes.decode_receipt` calls where the tree has it, else `Codec.decode_dict` calls), the changelog records
and the replies the fold produced. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100, help="requests per group (a batch: three groups' worth)")
    parser.add_argument("--shape", choices=["pipelined", "together"], default="pipelined")
    parser.add_argument("--src", type=Path, default=None, help="run the fold from this source tree")
    parser.add_argument("--no-started", action="store_true", help="COMPLETED carries started_at, no STARTED")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    src = (args.src or ROOT).resolve()
    sys.path[:0] = [str(src), str(ROOT)]  # the fold from `src`; the unit tests' fakes from this tree
    runs = [measure(args.requests, args.batch, args.shape, started=not args.no_started) for _ in range(args.repeats)]
    result = min(runs, key=lambda r: r["us_per_receipt"])
    result["runs_us_per_receipt"] = [r["us_per_receipt"] for r in runs]
    import reach

    print(json.dumps({"src": str(Path(reach.__file__).parents[1]), "shape": args.shape,
                      "started": not args.no_started, **result,
                      "load_avg_1m": round(os.getloadavg()[0], 2)}))


def measure(requests: int, group: int, shape: str, *, started: bool = True) -> dict[str, Any]:
    from reach.kafka import codec
    from reach.kafka import headers as H
    from reach.metrics import Metrics
    from reach.names import Names
    from reach.records import CandidateScore, Decision, Receipt, Status
    from reach.settings import KafkaSettings
    from reach.streams.status.fold import StatusFold
    from reach.streams.status.lookup import partition_of
    from reach.streams.status.ports import NoCallbacks
    from reach.streams.status.store import PartitionStore
    from tests.unit.streams.kafka_fakes import FakeConsumer, FakeMessage, FakeProducer, fold_batch

    names, partitions = Names("cost"), 4
    reply_to = names.replies("bench").encode()
    offsets = dict.fromkeys(range(partitions), 0)

    def message(receipt: Receipt) -> FakeMessage:
        partition = partition_of(receipt.message_id, partitions)
        offsets[partition] += 1
        headers = [(H.MESSAGE_ID, receipt.message_id.encode())]
        if receipt.status is Status.ROUTED:
            headers.append((H.REPLY_TO, reply_to))
        return FakeMessage(names.receipts, partition, offsets[partition], codec.encode(receipt),
                           receipt.message_id.encode(), headers)

    def receipts(i: int) -> list[FakeMessage]:
        mid, at = f"01JCOST{i:020d}", 1_767_000_000_000 + i
        common: dict[str, Any] = {"message_id": mid, "trace_id": f"trace-{i}", "tenant": "bench",
                                  "capability": "demo.echo", "deadline": at + 30_000}
        scores = [CandidateScore(instance_id=f"i{n}", agent_id="echo", score=0.5, fit=1.0, locality=1.0, load=0.5,
                                 affinity=0.0) for n in range(2)]
        routed = Receipt(**common, status=Status.ROUTED, at=at + 1, instance_id="i0", delivery_timeout_ms=10_000,
                         timings={"decide_us": 40},
                         decision=Decision(candidates=scores, picked_instance="i0", topic="cost.inbox.echo",
                                           partition=0, offset=i))
        began = Receipt(**common, status=Status.STARTED, at=at + 2, agent_id="echo", instance_id="i0")
        timings = {"run_ms": 3} if started else {"run_ms": 3, "started_at": at + 2}
        completed = Receipt(**common, status=Status.COMPLETED, at=at + 5, agent_id="echo", instance_id="i0",
                            result=b'{"echo": "hello"}', timings=timings)
        return [message(r) for r in ((routed, began, completed) if started else (routed, completed))]

    groups = [[receipts(i) for i in range(start, min(start + group, requests))] for start in range(0, requests, group)]
    batches: list[list[FakeMessage]] = []
    if shape == "together":
        batches = [[m for request in g for m in request] for g in groups]
    else:
        for n in range(len(groups) + len(groups[0][0]) - 1):
            batch = [request[0] for request in groups[n]] if n < len(groups) else []
            for back in range(1, len(groups[0][0])):  # a group's later receipts in the batches after its first
                batch += [request[back] for request in groups[n - back]] if 0 <= n - back < len(groups) else []
            batches.append(batch)

    class Producer(FakeProducer):
        def list_topics(self, topic: str, timeout: float = 0) -> Any:
            meta = type("Meta", (), {"error": None, "partitions": {0: object()}})()
            return type("Topics", (), {"topics": {topic: meta}})()

    with tempfile.TemporaryDirectory(prefix="fold-cost-") as tmp:
        fold = StatusFold(names=names, kafka=KafkaSettings(), metrics=Metrics(), state_dir=Path(tmp), url="http://c",
                          retention_ms=86_400_000, callbacks=NoCallbacks())
        fold.partitions = partitions
        for p in range(partitions):
            fold._stores[p] = PartitionStore(Path(tmp) / f"p{p}")
        consumer = FakeConsumer(assigned={(names.receipts, p) for p in range(partitions)})
        decoded = [0]
        decode = codec.Codec.decode_dict
        from reach.kafka import receiptbytes
        fast = getattr(receiptbytes, "decode_receipt", None)  # the generated reader, where the tree has it

        def counted(self: Any, name: str, data: bytes) -> dict[str, Any]:
            decoded[0] += name == "Receipt" and fast is None
            return decode(self, name, data)

        def counted_fast(data: bytes) -> dict[str, Any]:
            decoded[0] += 1
            return fast(data)  # type: ignore[misc]

        codec.Codec.decode_dict = counted  # type: ignore[method-assign]
        if fast is not None:
            receiptbytes.decode_receipt = counted_fast
        changelog = replies = 0
        cpu = 0.0
        wall = time.perf_counter()
        for batch in batches:
            producer = Producer()
            started = time.process_time()
            fold_batch(fold, consumer, producer, batch)  # type: ignore[arg-type]
            cpu += time.process_time() - started
            changelog += len(producer.to(names.status))
            replies += len(producer.to(names.replies("bench")))
        wall = time.perf_counter() - wall
        done = fold.row(f"01JCOST{requests - 1:020d}")
        assert done is not None and done.status is Status.COMPLETED and done.replied, "the fold did not finish"
        fold._close_stores(list(fold._stores))
        codec.Codec.decode_dict = decode  # type: ignore[method-assign]
        if fast is not None:
            receiptbytes.decode_receipt = fast
    count = sum(len(b) for b in batches)
    return {"receipts": count, "batches": len(batches), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3),
            "us_per_receipt": round(cpu / count * 1e6, 1), "us_per_request": round(cpu / requests * 1e6, 1),
            "per_request": {"receipts_decoded": round(decoded[0] / requests, 2),
                            "changelog_records": round(changelog / requests, 2),
                            "replies": round(replies / requests, 2)}}


if __name__ == "__main__":
    main()
