"""The soak's report: what fails a run, which horizon each store is judged past, the instance id of an agent log."""

from __future__ import annotations

from pathlib import Path

from reach.tooling.faults.checker import Seen, Sent, Window, check
from reach.tooling.soak.growth import Kind
from reach.tooling.soak.runner import Report, SoakSettings, instance_id, judge_all
from reach.tooling.soak.sampler import Sample


def report_with(values: list[dict[tuple[Kind, str], float]], *, minutes: float = 3.0,
                broker_shared: bool = False) -> Report:
    report = Report(SoakSettings(minutes=minutes, interval_s=minutes * 60 / (len(values) - 1),
                                 broker_shared=broker_shared))
    step = minutes * 60 / (len(values) - 1)
    report.samples = [Sample(i * step, v) for i, v in enumerate(values)]
    report.figures = check([Sent("m1", 0, True)], [Seen("m1", 0, "COMPLETED", 5)], [], Window(0, 10))
    report.verdicts = judge_all(report)
    return report


def test_a_flat_run_without_loss_passes() -> None:
    report = report_with([{(Kind.RSS, "router"): 100.0, (Kind.TOPICS, "namespace"): 30.0}] * 7)
    assert report.ok, report.misses
    assert {v.name for v in report.verdicts} == {"rss_mib router", "topics namespace"}


def test_growth_and_loss_are_misses() -> None:
    report = report_with([{(Kind.RSS, "router"): 100.0 + 20 * i} for i in range(7)])
    report.figures = check([Sent("m1", 0, True), Sent("m2", 0, True)], [Seen("m1", 0, "COMPLETED", 5)], [],
                           Window(0, 10))
    assert report.misses == ["1 lost", "rss_mib router grows: +60.0 over the last half > 16.0"]


def test_a_shared_brokers_growth_is_shown_not_judged_and_the_others_still_are() -> None:
    rising = [{(Kind.FDS, "broker JVM"): 500.0 + 50 * i, (Kind.RSS, "router"): 100.0 + 20 * i} for i in range(7)]
    alone = report_with(rising)
    assert alone.misses == ["open_fds broker JVM grows: +150.0 over the last half > 72.5",
                            "rss_mib router grows: +60.0 over the last half > 16.0"]
    shared = report_with(rising, broker_shared=True)
    assert shared.misses == ["rss_mib router grows: +60.0 over the last half > 16.0"]
    (broker,) = [v for v in shared.verdicts if v.name == "open_fds broker JVM"]
    assert not broker.judged and "--broker-shared" in broker.why_not and broker.rise == 150.0


def test_ttl_bound_series_use_the_run_ttl_or_the_products_defaults() -> None:
    assert SoakSettings(minutes=60).horizon_s(Kind.REDIS_KEYS) == 1800  # the result TTL
    assert SoakSettings(minutes=60).horizon_s(Kind.ROCKSDB) == 7 * 24 * 3600  # the status retention
    short = SoakSettings(minutes=10, ttl_s=240)
    assert short.horizon_s(Kind.ROCKSDB) == short.horizon_s(Kind.REDIS_MEMORY) == 240
    assert short.env() == {"REACH_TERMINAL_TTL": "240", "REACH_STATUS_RETENTION": "240",
                           "REACH_SOAK_RESULT_TTL": "240"}
    assert SoakSettings(minutes=10).env() == {}


def test_the_report_serialises_every_sample() -> None:
    report = report_with([{(Kind.REDIS_KEYS, "redis"): 10.0}] * 4)
    data = report.as_dict()
    assert data["samples"][0] == {"at_s": 0.0, "redis_keys redis": 10.0}
    assert data["verdicts"][0]["judged"] is False  # the 30-minute horizon is past a 3-minute run


def test_the_instance_id_comes_from_the_agents_start_line(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("2026 INFO reach.agent starting agent://faults/echo as instance i-1\nlater\n"
                   "2026 INFO reach.agent starting agent://faults/echo as instance i-2\n")
    assert instance_id(log) == "i-2"
    assert instance_id(tmp_path / "missing.log") is None


def test_the_plot_draws_rss_and_redis_memory_to_a_png(tmp_path: Path) -> None:
    from reach.tooling.soak.plot import plot

    report = report_with([{(Kind.RSS, "router pid 1"): 200.0 + i, (Kind.RSS, "agent churned pid 2"): 100.0,
                           (Kind.REDIS_MEMORY, "redis"): 1.0 + i} for i in range(7)])
    out = plot(report, tmp_path / "plots" / "soak.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
