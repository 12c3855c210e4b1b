"""`sdk_publish_rps`: the better of the SDK's pipelined publish rows, and only a row with nothing unacknowledged."""

from __future__ import annotations

from reach.tooling.bench.publish import SDK_ROWS
from reach.tooling.bench.report import TARGETS, Report
from reach.tooling.bench.results import ModeResult


def _row(mode: str, rate: float, lost: int = 0) -> ModeResult:
    return ModeResult(mode=mode, messages=1_000, throughput=rate, latency=None, cpu_per_1k=0.05, lost=lost,
                      duplicated=0)


def test_the_best_pipelined_row_with_every_ack_is_the_sdk_rate() -> None:
    many, concurrent = SDK_ROWS
    report = Report([_row("publish send", 350.0), _row(many, 17_000.4), _row(concurrent, 25_000.0, lost=3),
                     _row("publish plain confluent-kafka", 50_000.0)])
    assert report.sdk_publish_rps() == 17_000, "a row with unacknowledged envelopes, and the baseline, do not count"
    assert report.checks()["sdk_publish_rps"] == 17_000 and "sdk_publish_rps" in TARGETS
    assert report.as_dict()["sdk_publish_rps"] == 17_000


def test_no_publish_rows_no_rate() -> None:
    assert Report([_row("raw", 9_000.0)]).sdk_publish_rps() is None
