"""The peers mode's pure parts: ratios, the worker each peer runs, and what the report and its JSON show for them,
including issue 36's targets table."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from reach.tooling.bench import peers
from reach.tooling.bench.bisection import Knee
from reach.tooling.bench.knee import Run, Search, Step
from reach.tooling.bench.report import ISSUE_36, Report, render
from reach.tooling.bench.results import Latency, ModeResult
from reach.tooling.bench.slo import verdict


def searched(setup: str, knee: float, cpu: dict[str, float | None], figures: dict[str, float | None]) -> Search:
    passed = verdict(1_000, 1_000, {"COMPLETED": 1_000}, Latency("x", 1_000, 5, 8, 9, 12))
    step = Step(rate=knee, verdict=passed, cpu_per_1k=cpu, workers_per_1k=None, drained=True, settle_s=1.0,
                settled=True, costs=figures)
    found = Knee(knee=knee, failed_at=knee * 1.08, resolution=0.1, tried=((knee, True),))
    return Search(setup, runs=[Run(found, [step], [3.5, 3.0, 2.0], [3.9, 3.1, 2.0], 60.0)])


def run_report(*, faststream_skipped: bool = False, publish: float | None = None) -> Report:
    reach = searched("noop", 400, {"router": 1.2, "agent": 1.1, "broker JVM": 1.0, "bench": 0.3},
                     {"broker_requests_per_request": 6.2, "redis_round_trips_per_request": 1.4,
                      "records_produced_per_request": 6.3})
    plain = searched("plain", 20_000, {"client": 0.03, "worker": 0.02, "broker JVM": 0.03},
                     {"records_produced_per_request": 2.0})
    fast = (Search("faststream", skipped="faststream is not installed") if faststream_skipped
            else searched("faststream", 500, {"client": 0.3, "worker": 1.5, "broker JVM": 0.5}, {}))
    knees = [reach, plain, fast]
    rows = [s.row() for s in knees]
    if publish is not None:
        rows.append(ModeResult(mode="publish send_many", messages=5_000, throughput=publish, latency=None,
                               cpu_per_1k=None, lost=0, duplicated=0))
    return Report(rows, knees=knees)


def test_the_ratios_are_reach_over_each_peer() -> None:
    assert peers.ratios({"noop": 400, "plain": 20_000, "faststream": 500}) == {
        "reach_over_plain": 0.02, "reach_over_faststream": 0.8}
    assert peers.ratios({"noop": None, "plain": 20_000}) == {"reach_over_plain": None, "reach_over_faststream": None}


def test_each_peer_runs_its_own_worker() -> None:
    assert peers.worker_args("plain", "req", "rep", "g", 16)[0] == "reach.tooling.bench.peer_worker"
    assert peers.worker_args("faststream", "req", "rep", "g", 16) == [
        "reach.tooling.bench.faststream_worker", "req", "g", "16"]
    with pytest.raises(ValueError, match="unknown peer"):
        peers.worker_args("celery", "req", "rep", "g", 16)


def test_the_json_has_the_peers_knees_ratios_and_cpu_per_process() -> None:
    data = run_report().as_dict()["peers"]
    assert data["knee_rps"] == {"noop": 400, "plain": 20_000, "faststream": 500}
    assert data["ratios"] == {"reach_over_plain": 0.02, "reach_over_faststream": 0.8}
    assert data["cpu_ms_per_request_at_knee"]["plain"] == {"client": 0.03, "worker": 0.02, "broker JVM": 0.03}
    # the load generators (the bench, a peer's client) are shown, not counted as the product
    assert data["product_cpu_ms_per_request_at_knee"] == {"noop": 3.3, "plain": 0.05, "faststream": 2.0}
    assert data["loadavg_1_5_15_before"]["plain"] == [[3.5, 3.0, 2.0]]


def test_a_skipped_peer_has_no_ratio_and_says_why() -> None:
    data = run_report(faststream_skipped=True).as_dict()["peers"]
    assert data["ratios"]["reach_over_faststream"] is None and data["skipped"] == {
        "faststream": "faststream is not installed"}


def test_no_peers_no_peers_section() -> None:
    assert Report([], knees=[]).peers() is None


def test_issue_36_rows_carry_target_measure_and_command() -> None:
    rows = {r["key"]: r for r in run_report(publish=18_500.0).issue_36()}
    assert [r.key for r in ISSUE_36] == list(rows)
    assert rows["knee_noop_rps"]["measured"] == 400
    assert rows["knee_noop_cpu_ms_per_request"]["measured"] == 3.3
    assert rows["knee_noop_broker_requests_per_request"]["measured"] == 6.2
    assert rows["knee_noop_redis_round_trips_per_request"]["measured"] == 1.4
    assert rows["peers_reach_over_faststream"]["measured"] == 0.8
    assert rows["peers_reach_over_plain"]["measured"] == 0.02
    assert rows["sdk_publish_rps"]["measured"] == 18_500  # the publish mode's figure, when it ran
    assert rows["knee_echo_x2_rps"]["measured"] is None  # not run: no number in its place
    assert rows["runtime_modules_importing_confluent_kafka"]["measured"] >= 0
    assert all(r["target"] and r["command"].startswith(("reach bench", "any")) for r in rows.values())


def test_without_a_publish_mode_the_publish_rate_is_none() -> None:
    assert {r["key"]: r["measured"] for r in run_report().issue_36()}["sdk_publish_rps"] is None


def test_the_peers_and_issue_36_tables_render() -> None:
    out = io.StringIO()
    render(run_report(faststream_skipped=True), Console(file=out, width=220))
    text = out.getvalue()
    assert "peers: request-reply knees" in text and "reach_over_plain 0.02" in text
    assert "skipped: faststream is not installed" in text
    assert "issue 36: targets" in text and "20,000" in text
