"""`reach local up|down|status` starts and stops a real KRaft broker and Redis of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import AdminClient


def reach(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REACH_BOOTSTRAP", "REACH_REDIS_URL")}
    env["REACH_HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "reach", *args], capture_output=True, text=True, env=env,
                          timeout=180)


def test_up_is_idempotent_and_down_stops_what_it_started(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert reach(home, "local", "status").returncode == 4

    try:
        _up_twice_then_down(home)
    finally:
        reach(home, "local", "down")


def _up_twice_then_down(home: Path) -> None:
    first = reach(home, "local", "up")
    assert first.returncode == 0, first.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in first.stdout.splitlines())
    assert set(exports) == {"REACH_BOOTSTRAP", "REACH_REDIS_URL"}
    topics = AdminClient({"bootstrap.servers": exports["REACH_BOOTSTRAP"]}).list_topics(timeout=10)
    assert topics.brokers, "the broker answers a metadata request"

    second = reach(home, "local", "up")
    assert second.returncode == 0
    assert "already running" in second.stderr
    assert second.stdout == first.stdout, "same broker and Redis, not new ones"
    assert reach(home, "local", "status").returncode == 0

    down = reach(home, "local", "down")
    assert "stopped: kafka, redis" in down.stderr
    assert reach(home, "local", "status").returncode == 4
    assert "nothing was running" in reach(home, "local", "down").stderr
