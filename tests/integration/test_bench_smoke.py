"""`reach bench --quick` keeps working: every mode reports throughput, percentiles and no lost message.

Tiny counts on a shared machine: nothing here asserts on a timing. CI leaves out the idle row and the split-router
round trip (`--modes` without idle, `--no-split-router`): each starts a stack of its own to measure what the others
already start and stop (router, agent, the status fold in a process of its own as test_router_roles.py runs it);
`reach bench` keeps both. CI's form (decision 0067) also leaves out the peers mode, the knee's `echo x2` set-up,
the gateway mode and the intent mode (at load 20-45 they took 51, ~45, 119 and 122 s of the smoke's ~530; the
gateway's and the resolver's behaviour is tested in the parallel part): `make bench-smoke` (REACH_BENCH_SMOKE=full)
runs them and checks them here as before.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]
MEASURED = {"raw", "faust", "route", "route 2 workers", "round trip 50/s", "round trip 200/s",
            "scoring 10", "scoring 100", "scoring 1000"}
KNEES = {"knee noop", "knee echo x2"}
PEERS = {"knee plain", "knee faststream"}  # the peers mode beside the knee's own no-op search (reused, same run)
INTENT = {"intent exact", "intent semantic"}  # the resolver's stages (the `intent` extra, installed by make setup)
FULL = os.environ.get("REACH_BENCH_SMOKE") == "full"  # `make bench-smoke`: peers, echo knee, gateway, intent
CI_MODES = "raw,faust,quix,route,roundtrip,knee,status-scale,scoring" + (",gateway,intent,peers" if FULL else "")
KNEE_SETUPS = ("noop", "echo x2") if FULL else ("noop",)


@pytest.mark.serial  # six stacks start and stop: alone on the machine, and no other test disturbed by it
@pytest.mark.timeout(600)  # 126 s alone with eight stacks (CI, idle machine); with the peers 395 s at load 9-13
def test_quick_bench_reports_every_mode_without_loss(infra: Infra, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "REACH_BOOTSTRAP": infra.bootstrap, "REACH_REDIS_URL": infra.redis_url,
           "REACH_TOPICS_FILE": str(ROOT / "topics.yaml")}
    done = subprocess.run([sys.executable, "-m", "reach", "bench", "--quick", "--modes", CI_MODES, "--no-split-router",
                           "--knee-setups", ",".join(KNEE_SETUPS), "--json", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "reach bench" in done.stdout

    report = json.loads(out.read_text())
    modes = {m["mode"]: m for m in report["modes"]}
    # the gateway mode: both rows, or one row saying why no gateway answered (a build without `reach gateway`)
    gateway = {"gateway 50/s", "kafka send 50/s"} if "gateway 50/s" in modes else {"gateway"} if FULL else set()
    knees = KNEES | PEERS if FULL else {f"knee {s}" for s in KNEE_SETUPS}
    assert set(modes) == MEASURED | knees | (INTENT if FULL else set()) | {"quix", "status-scale"} | gateway
    if "gateway" in modes:
        assert modes["gateway"]["notes"].startswith("skipped: no gateway answering 202"), modes["gateway"]
    assert all(m["lost"] == 0 for m in modes.values())
    quix = modes["quix"]  # measured like faust, or says why its own environment could not be built
    assert quix["throughput"] > 0 or quix["notes"].startswith("skipped: "), quix
    scale = modes["status-scale"]  # the status engine's figures, or "not available on this build"
    assert scale["figures"] or "not available on this build" in scale["notes"], scale
    for name in MEASURED:
        mode = modes[name]
        assert mode["throughput"] > 0, name
        assert mode["lost"] == 0, name
        assert mode["duplicated"] >= 0, name
        lat = mode["latency"]
        assert lat["count"] > 0 and 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], name
    assert modes["round trip 200/s"]["steps"]["router hop"]["count"] > 0
    assert set(report["ratios"]) == {"route_over_raw", "route_over_faust", "route_over_quix", "route_2_workers_over_1"}
    assert all(v is None or v > 0 for v in report["ratios"].values())
    assert report["ratios"]["route_over_faust"] and report["ratios"]["route_2_workers_over_1"]
    assert set(report["measured"]) == set(report["targets"])

    # the knee search ran its (tiny) bisection for both set-ups; whether 20/s passes on a busy machine is not asserted
    assert set(report["knee_rps"]) == set(KNEE_SETUPS) | ({"plain", "faststream"} if FULL else set())
    for search in report["knee"]:
        assert search["skipped"] is None and search["lost"] == 0, search["setup"]
        (only,) = search["runs"]
        assert only["steps"] and all(s["messages"] >= 10 for s in only["steps"])
        assert len(only["loadavg_1_5_15_before"]) == 3 and only["resolution"] == 0.5
        knee = report["knee_rps"][search["setup"]]
        assert knee is None or knee in {s["rate"] for s in only["steps"] if s["passed"]}
    # where a request's cost goes besides CPU, read from the broker and Redis themselves (reach.tooling.bench.costs)
    spent = modes["round trip 200/s"]["figures"]
    assert spent["broker_requests_per_request"] > 0 and spent["broker_Produce_per_request"] > 0, spent
    assert spent["redis_commands_per_request"] > 0, spent
    assert report["measured"]["round_trip_200_broker_requests_per_request"] == spent["broker_requests_per_request"]
    rt = modes["round trip 200/s"]["cpu_by_process"]
    assert {"router", "agent", "broker JVM", "bench"} <= set(rt) and rt["router"] is not None
    # records produced by topic family (end offsets) and the processes' own Redis round trips, per request
    assert spent["records_produced_cap_per_request"] == 1.0 and spent["records_produced_receipts_per_request"] >= 2
    assert spent["records_produced_per_request"] >= 4 and spent["redis_round_trips_per_request agent"] > 0, spent

    issue_36 = {row["key"]: row for row in report["issue_36"]}
    assert issue_36["runtime_modules_importing_confluent_kafka"]["measured"] == len(
        report["runtime_modules_importing_confluent_kafka"])
    assert issue_36["knee_noop_records_produced_per_request"]["measured"] is not None
    if FULL:
        check_peers(report, modes)


def check_peers(report: dict, modes: dict[str, dict]) -> None:
    """The peers: plain confluent-kafka and FastStream request-reply, judged like Reach, in the same run."""
    peers = report["peers"]
    assert set(peers["knee_rps"]) == {"noop", "plain", "faststream"} and not peers["skipped"], peers
    assert set(peers["ratios"]) == {"reach_over_plain", "reach_over_faststream"}
    for peer in ("plain", "faststream"):
        assert modes[f"knee {peer}"]["lost"] == 0 and modes[f"knee {peer}"]["duplicated"] == 0, peer
        cpu = peers["cpu_ms_per_request_at_knee"][peer]
        assert {"client", "worker", "broker JVM"} == set(cpu) and cpu["worker"] > 0, cpu
        at_knee = peers["figures_at_knee"][peer]  # a request and its reply: two records
        assert at_knee["records_produced_requests_per_request"] == 1.0, at_knee
        assert at_knee["records_produced_replies_per_request"] == 1.0, at_knee
