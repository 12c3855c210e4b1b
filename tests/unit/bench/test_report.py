"""The bench report: every target has its measured value, the JSON carries knees and CPU per process, tables render."""

from __future__ import annotations

import io

from rich.console import Console

from reach.tooling.bench.bisection import Knee
from reach.tooling.bench.knee import Run, Search, Step
from reach.tooling.bench.report import TARGETS, Report, render
from reach.tooling.bench.results import Latency, ModeResult
from reach.tooling.bench.slo import Verdict


def row(mode: str, throughput: float, **extra: object) -> ModeResult:
    return ModeResult(mode=mode, messages=1_000, throughput=throughput, latency=Latency("x", 1_000, 1, 2, 3, 4),
                      cpu_per_1k=0.2, lost=0, duplicated=0, **extra)  # type: ignore[arg-type]


def search(knee: float | None) -> Search:
    verdict = Verdict(messages=1_000, completed=1_000, outcomes={"COMPLETED": 1_000},
                      latency=Latency("created_at -> COMPLETED receipt at", 1_000, 5, 8, 9, 12), passed=True)
    steps = [Step(rate=knee or 50, verdict=verdict, cpu_per_1k={"router": 0.3, "broker JVM": None},
                  workers_per_1k=0.3, drained=True, settle_s=1.0, settled=True)]
    found = Knee(knee=knee, failed_at=(knee or 50) * 1.05, resolution=0.1, tried=((knee or 50, True),))
    return Search("noop", runs=[Run(found, steps, [1.0, 1.0, 1.0], [1.2, 1.0, 1.0], 60.0)])


def report() -> Report:
    rt = row("round trip 200/s", 190, cpu_by_process={"router": 1.0, "agent": 0.5, "broker JVM": None},
             figures={"completed_fraction": 1.0})
    rt.steps["completed receipt"] = Latency("b", 10, 7, 9, 11, 20)
    return Report([row("raw", 100_000), row("faust", 3_000), row("quix", 20_000), row("route", 9_000),
                   row("route 2 workers", 12_000), rt, ModeResult.skip("status-scale", "not available on this build"),
                   search(1_900).row()], knees=[search(1_900)])


def test_every_target_has_a_measured_value_or_none() -> None:
    checks = report().checks()
    assert set(checks) == set(TARGETS)
    assert checks["knee_noop_rps"] == 1_900 and checks["route_2_workers_throughput"] == 12_000
    assert checks["round_trip_200_completed_p50_ms"] == 7 and checks["round_trip_200_completed_p99_ms"] == 11
    assert checks["status_scale_rss_mib"] is None  # skipped: no number in its place
    assert report().ratios() == {"route_over_raw": 0.09, "route_over_faust": 3.0, "route_over_quix": 0.45,
                                 "route_2_workers_over_1": 1.333}


def test_issue_23_figures_come_from_the_knee_step() -> None:
    checks = report().checks()
    assert checks["knee_noop_max_ms"] == 12  # the slowest request of the step that passed at the knee
    assert checks["knee_noop_cpu_ms_per_request"] is None  # the broker JVM's CPU was not readable: no sum
    assert checks["knee_echo_x2_rps"] is None and checks["round_trip_1000_broker_requests_per_request"] is None
    step = Step(rate=300, verdict=search(300).runs[0].steps[0].verdict, workers_per_1k=1.0, drained=True,
                settle_s=1.0, settled=True,
                cpu_per_1k={"router": 1.4, "router/77": 0.1, "agent": 1.5, "broker JVM": 1.3, "bench": 0.4,
                            "bench/78": 0.1})
    found = Knee(knee=300, failed_at=330, resolution=0.1, tried=((300, True),))
    measured = Search("noop", runs=[Run(found, [step], [1.0] * 3, [1.0] * 3, 60.0)])
    assert Report([measured.row()], knees=[measured]).checks()["knee_noop_cpu_ms_per_request"] == 4.3  # no bench


def test_the_json_has_knees_cpu_per_process_and_the_skip() -> None:
    data = report().as_dict()
    assert data["knee_rps"] == {"noop": 1_900}
    assert data["knee"][0]["runs"][0]["steps"][0]["settled"] is True
    assert data["cpu_per_1k_by_process"]["round trip 200/s"]["broker JVM"] is None
    assert next(m for m in data["modes"] if m["mode"] == "status-scale")["skipped"] == "not available on this build"
    assert data["status_scale"] == {"skipped": "not available on this build"}


def test_a_search_without_a_knee_shows_the_lowest_rate_tried() -> None:
    none = search(None)
    assert none.knee_rps is None
    line = none.row()
    assert line.throughput == 0 and "no knee in range" in line.notes and line.latency is not None


def test_the_tables_render() -> None:
    out = io.StringIO()
    render(report(), Console(file=out, width=200))
    text = out.getvalue()
    assert "CPU s per 1,000 messages, by process" in text and "n/a" in text
    assert "knee search" in text and "[1900, 1995)" in text
