"""`reach bench --modes swarm`: a fleet of SDK instances in a few processes, traffic over it, 10 of them leaving
at once and rejoining, repeated business keys; every request ends, the figures a user reads are all there.

CI's short version of the 1,200-agent run (docs/performance.md; `make bench-swarm` runs the default fleet): 40 agents
in two processes, two 5 s traffic phases (8 s until decision 0072: the second still sends for 3 s after the ten leave,
and the rejoin is awaited either way). Nothing here asserts on a timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 5  # each traffic phase
FIGURES = {"start_s", "heartbeat_and_load_records_per_s", "router_cpu_per_1k_heartbeats_s", "router_rss_mib",
           "workers_rss_mib", "partitions", "replicas", "max_replicas_per_broker", "departure_converged_s",
           "rejoin_s", "idempotency_hit_rate", "redis_round_trips_per_request_unique"}


@pytest.mark.serial  # 40 agent instances, a stream app and their inboxes: alone on the machine
@pytest.mark.timeout(600)
def test_a_swarm_loses_nothing_while_instances_leave_and_rejoin(infra: Infra, tmp_path: Path) -> None:
    out = tmp_path / "swarm.json"
    env = {**os.environ, "REACH_BOOTSTRAP": infra.bootstrap, "REACH_REDIS_URL": infra.redis_url,
           "REACH_TOPICS_FILE": str(ROOT / "topics.yaml")}
    done = subprocess.run([sys.executable, "-m", "reach", "bench", "--modes", "swarm", "--agents", "40",
                           "--swarm-processes", "2", "--agents-per-capability", "10", "--swarm-rate", "20",
                           "--swarm-seconds", str(SECONDS), "--leave", "10", "--repeat-share", "0.25",
                           "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [swarm] = [m for m in json.loads(out.read_text())["modes"] if m["mode"] == "swarm 40x1"]
    assert swarm["messages"] == 2 * 20 * SECONDS and swarm["lost"] == 0, swarm
    figures = swarm["figures"]
    assert figures["instances"] == 40 and figures["capabilities"] == 4, figures
    assert FIGURES <= {k for k, v in figures.items() if v is not None}, figures
    assert 0 < figures["idempotency_hits"] <= figures["repeated_keys_sent"], figures
    assert {"decision", "decision under heartbeats", "router hop"} <= set(swarm["steps"]), swarm["steps"]
