"""Status-table scale: fold N messages x 4 receipts into the on-disk store, then recover it in a fresh worker.

`status_scale(messages=500_000)` pre-produces ACCEPTED, ROUTED (3 scored candidates), STARTED and
COMPLETED (a ~300-byte result) per message to a throwaway namespace, runs the status fold in a
child process (so its RSS is its own) until every receipt is committed, then starts a second child
with an empty state directory that takes over every partition from the changelog.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition

from reach.envelopes import now_ms
from reach.kafka import clients
from reach.kafka.codec import encode_dict
from reach.settings import KafkaSettings
from reach.streams.status.ports import NoCallbacks
from reach.tooling.bench.workspace import Workspace

_RESULT = b'{"text": "' + b"r" * 280 + b'"}'


@dataclass(frozen=True)
class StatusScale:
    """What one status-scale run measured."""

    messages: int
    receipts: int
    fold_s: float
    receipts_per_s: float
    fold_rss_mib: float  # peak resident set of the folding process
    disk_mib: float
    rows: int
    recovery_s: float  # a fresh worker (empty state directory) taking over every partition
    recovered_rows: int
    recovery_rss_mib: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def status_scale(*, messages: int = 500_000, kafka: KafkaSettings | None = None,
                 topics_file: Path = Path("topics.yaml"), timeout_s: float = 1_800) -> StatusScale:
    """Run the measurement (minutes at the default size); the namespace's topics are deleted afterwards."""
    ws = Workspace(kafka=kafka, topics_file=topics_file)
    work = Path(tempfile.mkdtemp(prefix="reach-status-scale-"))
    try:
        total = ws.burst(_receipts(ws, messages))
        servers = ws.kafka.servers()
        folded = _child(_fold, servers, ws.namespace, work / "first", total, timeout_s)
        disk = sum(f.stat().st_size for f in (work / "first").rglob("*") if f.is_file())
        recovered = _child(_recover, servers, ws.namespace, work / "fresh", total, timeout_s)
        return StatusScale(messages=messages, receipts=total, fold_s=round(folded["seconds"], 2),
                           receipts_per_s=round(total / folded["seconds"]), fold_rss_mib=folded["rss_mib"],
                           disk_mib=round(disk / 2**20, 1), rows=folded["rows"],
                           recovery_s=round(recovered["seconds"], 2), recovered_rows=recovered["rows"],
                           recovery_rss_mib=recovered["rss_mib"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
        ws.delete()


def _receipts(ws: Workspace, messages: int) -> Any:
    """(topic, key, value): four receipts per message, in windows of 1,000 messages step by step."""
    topic, at = ws.names.receipts, now_ms()
    candidates = [{"instance_id": f"echo-{n}", "agent_id": "agent://demo/echo", "score": 0.8 - n / 10, "fit": 1.0,
                   "locality": 1.0, "load": 0.5, "affinity": 0.0} for n in range(3)]
    for window in range(0, messages, 1_000):
        ids = [f"scale-{seq:08d}" for seq in range(window, min(window + 1_000, messages))]
        for step in ("ACCEPTED", "ROUTED", "STARTED", "COMPLETED"):
            for mid in ids:
                base: dict[str, Any] = {
                    "message_id": mid, "trace_id": mid, "tenant": "default", "capability": "demo.echo",
                    "status": step, "at": at, "deadline": at + 120_000, "delivery_timeout_ms": 5_000}
                if step == "ROUTED":
                    base |= {"agent_id": "agent://demo/echo", "instance_id": "echo-0", "decision": {
                        "candidates": candidates, "picked_instance": "echo-0", "topic": ws.names.inbox(
                            "agent://demo/echo"), "partition": 3, "offset": 123_456,
                        "weights": {"fit": 0.4, "locality": 0.2, "load": 0.3, "affinity": 0.1}}}
                elif step != "ACCEPTED":
                    base |= {"agent_id": "agent://demo/echo", "instance_id": "echo-0"}
                if step == "COMPLETED":
                    base |= {"result": _RESULT, "step_status": "ok", "timings": {"handler_us": 120}}
                yield topic, mid, encode_dict("Receipt", base)
        at += 1


def _child(target: Any, servers: str, namespace: str, state_dir: Path, total: int, timeout_s: float
           ) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(servers, namespace, state_dir, total, timeout_s, queue))
    proc.start()
    try:
        result: dict[str, Any] = queue.get(timeout=timeout_s + 60)
    finally:
        proc.join(60)
    if "error" in result:
        raise RuntimeError(f"status-scale child failed: {result['error']}")
    return result


def _fold_worker(servers: str, namespace: str, state_dir: Path) -> Any:
    from reach.metrics import Metrics
    from reach.names import Names
    from reach.streams.status.fold import StatusFold

    return StatusFold(names=Names(namespace), kafka=KafkaSettings(bootstrap=servers), metrics=Metrics(),
                      state_dir=state_dir, url="http://127.0.0.1:0", retention_ms=7 * 24 * 3600 * 1000,
                      batch_size=2_000, callbacks=NoCallbacks())


def _fold(servers: str, namespace: str, state_dir: Path, total: int, timeout_s: float, queue: Any) -> None:
    """Child: fold every receipt; report seconds from start to the last commit, rows and peak RSS."""
    from reach.names import Names
    from reach.streams.status.fold import fold_group

    try:
        names = Names(namespace)
        fold = _fold_worker(servers, namespace, state_dir)
        watcher = clients.consumer(fold_group(names), KafkaSettings(bootstrap=servers))
        parts = [TopicPartition(names.receipts, p) for p in watcher.list_topics(names.receipts, timeout=10)
                 .topics[names.receipts].partitions]
        ends = {tp.partition: watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        started = time.monotonic()
        fold.start()
        deadline = started + timeout_s
        while time.monotonic() < deadline:
            committed = {tp.partition: tp.offset for tp in watcher.committed(parts, timeout=10)}
            if all(committed.get(p, -1) >= end for p, end in ends.items()):
                break
            time.sleep(0.2)
        seconds = time.monotonic() - started
        rows = fold.table_size()
        fold.stop()
        watcher.close()
        queue.put({"seconds": seconds, "rows": rows, "rss_mib": _peak_rss_mib()})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": repr(exc)})


def _recover(servers: str, namespace: str, state_dir: Path, total: int, timeout_s: float, queue: Any) -> None:
    """Child: a fresh worker with an empty state directory; seconds until it owns every partition."""
    try:
        fold = _fold_worker(servers, namespace, state_dir)
        started = time.monotonic()
        fold.start()
        deadline = started + timeout_s
        while time.monotonic() < deadline and not (fold.partitions and all(
                fold.owns(p) for p in range(fold.partitions))):
            time.sleep(0.05)
        seconds = time.monotonic() - started
        rows = fold.table_size()
        fold.stop()
        queue.put({"seconds": seconds, "rows": rows, "rss_mib": _peak_rss_mib()})
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put({"error": repr(exc)})


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0
