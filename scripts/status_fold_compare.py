"""Fold the same receipts with the old faust status table (commit 69e9a83) and with the RocksDB fold.

Usage (a broker in REACH_BOOTSTRAP):  .venv/bin/python scripts/status_fold_compare.py [MESSAGES]
Prints receipts/s for each engine (time from start to the last receipts offset committed).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import TopicPartition

from reach.tooling.bench import status_scale
from reach.tooling.bench.workspace import Workspace
from reach.kafka import clients
from reach.tooling.local.process import free_port

ROOT = Path(__file__).resolve().parents[1]
OLD = "69e9a83"


def faust_child(namespace: str, module_path: str, port: int) -> None:
    """Run main's faust status table (agent + in-memory Table + changelog) alone, as its worker did."""
    import faust

    from reach.metrics import Metrics
    from reach.names import Names
    from reach.settings import KafkaSettings

    spec = importlib.util.spec_from_file_location("old_status_table", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    names = Names(namespace)
    app = faust.App(names.router_app_id, broker=f"kafka://{KafkaSettings().servers()}", web_port=port,
                    autodiscover=False, store="memory://", topic_partitions=4, broker_session_timeout=10.0)
    module.attach_status_table(app, names, Metrics(), partitions=4, retention_s=604800)
    faust.Worker(app, loglevel="WARNING").execute_from_commandline()


def wait_committed(ws: Workspace, group: str, started: float, *, alive: subprocess.Popen[bytes],
                   timeout: float = 900) -> float:
    watcher = clients.consumer(group, ws.kafka)
    topic = ws.names.receipts
    parts = [TopicPartition(topic, p) for p in watcher.list_topics(topic, timeout=10).topics[topic].partitions]
    ends = {tp.partition: watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
    try:
        while time.monotonic() - started < timeout:
            if alive.poll() is not None:
                raise RuntimeError(f"the faust worker exited with {alive.returncode}")
            done = {tp.partition: tp.offset for tp in watcher.committed(parts, timeout=10)}
            if all(done.get(p, -1) >= end for p, end in ends.items()):
                return time.monotonic() - started
            time.sleep(0.2)
        raise TimeoutError(f"group {group} did not commit every receipt within {timeout}s")
    finally:
        watcher.close()


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
    # one namespace per engine: each writes its own status changelog and must not recover the other's
    faust_ws, rocks_ws = Workspace(), Workspace()
    try:
        total = faust_ws.burst(status_scale._receipts(faust_ws, messages))  # noqa: SLF001 - the bench's receipts
        rocks_ws.burst(status_scale._receipts(rocks_ws, messages))  # noqa: SLF001
        old = Path(tempfile.mkdtemp()) / "old_status_table.py"
        old.write_bytes(subprocess.check_output(["git", "show", f"{OLD}:reach/streams/status_table.py"], cwd=ROOT))
        env = {**os.environ, "REACH_NAMESPACE": faust_ws.namespace}
        started = time.monotonic()
        child = subprocess.Popen([sys.executable, __file__, "--faust-child", faust_ws.namespace, str(old),
                                  str(free_port()), "worker"], cwd=ROOT, env=env)
        try:
            faust_s = wait_committed(faust_ws, faust_ws.names.router_app_id, started, alive=child)
        finally:
            child.terminate()
            child.wait(60)
        rocks = status_scale._child(status_scale._fold, rocks_ws.kafka.servers(), rocks_ws.namespace,  # noqa: SLF001
                                    Path(tempfile.mkdtemp()) / "rocks", total, 900)
        print(f"{total} receipts ({messages} messages x 4)")
        print(f"faust table fold (commit {OLD}): {faust_s:.1f} s, {total / faust_s:,.0f} receipts/s")
        print(f"RocksDB fold (reach.streams.status): {rocks['seconds']:.1f} s, "
              f"{total / rocks['seconds']:,.0f} receipts/s, peak RSS {rocks['rss_mib']} MiB")
    finally:
        faust_ws.delete()
        rocks_ws.delete()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--faust-child":
        namespace, module_path, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
        sys.argv = [sys.argv[0], *sys.argv[5:]]
        faust_child(namespace, module_path, port)
    else:
        main()
