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
        assert not producer.is_alive() and len(sent) == TOTAL, f"only {len(sent)} of {TOTAL} sent"
        before_restart = {r.message_id for r in tail.poll() if r.status is Status.ROUTED}
        assert len(before_restart) < TOTAL, "the kill came too late to prove anything"
        restarted = start_router()

        def all_routed_and_completed(receipts: list) -> bool:  # type: ignore[type-arg]
            # A forward acknowledged just before the kill may be COMPLETED by the worker while its ROUTED receipt
            # was still in flight: the restarted router reads that record again (not committed) and routes it once
            # more, possibly after every message has COMPLETED. So wait for both, not for COMPLETED alone.
            seen = {(r.message_id, r.status) for r in receipts}
            return all((m, Status.COMPLETED) in seen and (m, Status.ROUTED) in seen for m in sent)

        tail.until(all_routed_and_completed, timeout=120, what=f"ROUTED and COMPLETED for all {TOTAL} messages")
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
