"""`reach bench --quick` keeps working: every mode reports throughput, percentiles and no lost message.

Tiny counts on a shared machine: nothing here asserts on a timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]
MODES = {"raw", "faust", "route", "round trip 50/s", "round trip 200/s", "scoring 10", "scoring 100", "scoring 1000"}


def test_quick_bench_reports_every_mode_without_loss(infra: Infra, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "REACH_BOOTSTRAP": infra.bootstrap, "REACH_REDIS_URL": infra.redis_url,
           "REACH_TOPICS_FILE": str(ROOT / "topics.yaml")}
    done = subprocess.run([sys.executable, "-m", "reach", "bench", "--quick", "--json", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "reach bench" in done.stdout

    report = json.loads(out.read_text())
    modes = {m["mode"]: m for m in report["modes"]}
    assert set(modes) == MODES
    for name, mode in modes.items():
        assert mode["throughput"] > 0, name
        assert mode["lost"] == 0, name
        assert mode["duplicated"] >= 0, name
        lat = mode["latency"]
        assert lat["count"] > 0 and 0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], name
    assert modes["round trip 200/s"]["steps"]["router hop"]["count"] > 0
    assert set(report["ratios"]) == {"route_over_raw", "route_over_faust"}
    assert all(v is not None and v > 0 for v in report["ratios"].values())
