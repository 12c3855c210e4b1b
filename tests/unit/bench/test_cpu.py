"""Per-process CPU of a bench step: deltas per 1,000 messages, the broker's address, this machine's processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from reach.tooling.bench import cpu


def test_per_1k_of_each_process_between_two_readings() -> None:
    before = {"router": 10.0, "agent": 2.0, "broker JVM": None}
    after = {"router": 12.0, "agent": 2.5, "broker JVM": None, "router/77": 0.4}
    assert cpu.per_1k(before, after, 2_000) == {"router": 1.0, "agent": 0.25, "broker JVM": None, "router/77": 0.2}


def test_a_process_gone_by_the_second_reading_is_not_a_number() -> None:
    assert cpu.per_1k({"agent": 1.0}, {"agent": None}, 100) == {"agent": None}
    assert cpu.per_1k({"agent": 1.0}, {}, 100) == {"agent": None}
    assert cpu.per_1k({"agent": 1.0}, {"agent": 2.0}, 0) == {"agent": None}


@pytest.mark.parametrize("servers,port", [
    ("127.0.0.1:9092", 9092), ("localhost:19092", 19092), ("PLAINTEXT://127.0.0.1:9092", 9092),
    ("kafka.example.com:9092", None), ("127.0.0.1:9092,127.0.0.1:9093", None), ("127.0.0.1", None), ("", None),
])
def test_only_a_single_loopback_bootstrap_has_a_local_broker(servers: str, port: int | None) -> None:
    assert cpu.loopback_port(servers) == port


def test_a_remote_broker_has_no_pid() -> None:
    assert cpu.broker_pid("kafka.example.com:9092") is None


def test_reads_a_process_and_the_processes_it_started() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        reading = cpu.read({"me": os.getpid(), "gone": None})
        assert reading["me"] is not None and reading["me"] > 0
        assert reading["gone"] is None
        assert f"me/{child.pid}" in reading
        split = cpu.read({"me": os.getpid(), "child": child.pid})
        assert "child" in split and f"me/{child.pid}" not in split  # a labelled child is not counted twice
    finally:
        child.kill()
        child.wait()
