"""`reach demo --duration 20` on the test broker: real traffic, a summary that adds up, nothing left running."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.stream_app import ROOT

pytestmark = pytest.mark.integration


def processes_with(marker: bytes) -> list[int]:
    """Pids (other than this one) whose environment holds `marker`: everything the demo started has it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def total(summary: str, name: str) -> int:
    match = re.search(rf"\b{name} (\d+)\b", summary)
    assert match, f"no `{name} N` in the totals line: {summary}"
    return int(match.group(1))


@pytest.mark.timeout(400)
def test_demo_runs_traffic_and_stops_everything_it_started(namespace: str, tmp_path: Path) -> None:
    env = {**os.environ, "REACH_HOME": str(tmp_path / "home"), "COLUMNS": "160"}
    done = subprocess.run([sys.executable, "-m", "reach", "demo", "--duration", "20"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=360)
    out = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}\n{out}\n{done.stderr}"

    assert not processes_with(f"REACH_NAMESPACE={namespace}".encode()), "the demo left a child process running"
    assert f"namespace {namespace}" in out  # REACH_NAMESPACE set: the demo uses it
    assert "starting a local Kafka broker" not in out  # REACH_BOOTSTRAP set: no local broker of its own
    assert re.search(r"^\[\s*\d+s\] traffic: sent=\d+", out, re.M), "no compact progress lines when piped"

    totals = next(line for line in out.splitlines() if line.startswith("totals:"))
    assert total(totals, "completed") > 0
    assert total(totals, "rejected") > 0
    assert total(totals, "unroutable") + total(totals, "dead-lettered") > 0
    planned = re.search(r"as planned: (\d+)/(\d+) ended as their kind expects", out)
    assert planned, out
    # on a busy machine a few requests may be shed (OVERLOAD) or rerouted; the mix must still behave
    as_planned, finished = int(planned.group(1)), int(planned.group(2))
    assert finished > 0 and as_planned >= 0.95 * finished, out
    for kind in ("streamed answer (5 chunks)", "two-turn conversation"):  # the writer streams; the interview asks
        ended = re.search(rf"{re.escape(kind)}\W+\d+\W+COMPLETED\W+COMPLETED (\d+)", out)  # its by-kind row
        assert ended and int(ended.group(1)) >= 1, f"no {kind} ended COMPLETED:\n{out}"
    legacy = re.search(r"legacy, served by its fallback \(echo\)\W+\d+\W+COMPLETED\W+COMPLETED (\d+)", out)
    assert legacy and int(legacy.group(1)) >= 1, f"no demo.legacy request served by its fallback:\n{out}"
    served = re.search(r"^fallback: \d+ requests handed on to their POLICY fallback demo\.echo \(UNROUTABLE \d+\), "
                       r"served by demo\.echo: COMPLETED (\d+)", out, re.M)
    assert served and int(served.group(1)) >= 1, out
    assert "POLICY fallback: demo.legacy -> demo.echo" in out
    assert f"export REACH_NAMESPACE={namespace}" in out and "reach dlq ls" in out
    assert "reach receipts sql -f docs/queries/success_rate.sql" in out
    sick = next(line for line in out.splitlines() if "demo/sick" in line)  # the sick instance, with its breaker
    assert re.search(r"\b(CLOSED|OPEN|HALF_OPEN)\b", sick), sick
