"""SIGKILL the router (`python -m reach router`) under load, restart it: no envelope is lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reach.envelopes import new_envelope
from reach.names import Names
from reach.records import Status
from tests.integration.router_helpers import Instance, Sender, Worker, receipts_tail

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
TOTAL = 3000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_router() -> subprocess.Popen[bytes]:
    """The stream app as users run it: `reach router` (faust worker hosting the confluent hot path)."""
    env = {**os.environ, "REACH_WEB_PORT": str(free_port())}
    return subprocess.Popen([sys.executable, "-m", "reach", "router", "--interval", "1"], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_sigkill_under_load_loses_nothing(namespace: str) -> None:
    names = Names(namespace)
    instances = [Instance(names, f"w{n}", max_concurrency=100_000, partitions=[2 * n, 2 * n + 1]) for n in range(2)]
    for inst in instances:
        inst.heartbeat()
    workers = [Worker(inst) for inst in instances]
    sender = Sender(names)
    sender.many(1)  # creates the capability topic
    tail = receipts_tail(names)
    sent: list[str] = []

    def produce_all() -> None:
        for i in range(TOTAL):
            env = new_envelope("text.echo", {"i": i}, session_key=f"s{i % 50}", budget_ms=300_000)
            sent.append(sender.send(env))
        sender.flush()

    router = start_router()
    restarted: subprocess.Popen[bytes] | None = None
    try:
        producer = threading.Thread(target=produce_all)
        producer.start()

        def routed() -> int:
            return sum(1 for r in tail.poll() if r.status is Status.ROUTED)

        tail.until(lambda _: routed() >= 300, timeout=60, what="the router routing under load")
        router.send_signal(signal.SIGKILL)
        router.wait(10)
        producer.join(60)
        before_restart = {r.message_id for r in tail.poll() if r.status is Status.ROUTED}
        assert len(before_restart) < TOTAL, "the kill came too late to prove anything"
        restarted = start_router()

        def all_completed(receipts: list) -> bool:  # type: ignore[type-arg]
            done = {r.message_id for r in receipts if r.status is Status.COMPLETED}
            return done.issuperset(sent)

        tail.until(all_completed, timeout=120, what=f"COMPLETED for all {TOTAL} messages")
        statuses = {(r.message_id, r.status) for r in tail.records}
        assert all((m, Status.ROUTED) in statuses for m in sent)
        print(f"routed before the kill: {len(before_restart)}; "
              f"ROUTED receipts in all: {sum(1 for r in tail.records if r.status is Status.ROUTED)}")
    finally:
        for proc in (router, restarted):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(20)
        for w in workers:
            w.stop()
        tail.close()
