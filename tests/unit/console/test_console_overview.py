"""The overview's SQL over the same DuckDB view `reach receipts sql` loads."""

from __future__ import annotations

from pathlib import Path

from reach import analytics
from reach.console import overview
from reach.records import ErrorInfo, Receipt, Status


def _receipt(mid: str, status: Status, at: int, *, attempt: int = 1, kind: str | None = None) -> Receipt:
    error = ErrorInfo(kind=kind, code=kind, message="x") if kind else None
    return Receipt(message_id=mid, trace_id="t", tenant="acme", capability="demo.echo", status=status,
                   attempt=attempt, at=at, error=error)


def test_per_capability_counts_rates_and_latency(tmp_path: Path) -> None:
    receipts = [
        _receipt("a", Status.ACCEPTED, 1_000), _receipt("a", Status.COMPLETED, 1_100),
        _receipt("b", Status.ACCEPTED, 1_000), _receipt("b", Status.ATTEMPT_FAILED, 1_050),
        _receipt("b", Status.COMPLETED, 1_300, attempt=2),
        _receipt("c", Status.ACCEPTED, 2_000), _receipt("c", Status.FAILED, 2_500, kind="OVERLOAD"),
        _receipt("d", Status.ACCEPTED, 2_000),  # still in flight: not counted
    ]
    con = analytics.load(iter([analytics.flatten(r) for r in receipts]), tmp_path)
    [stats] = overview.per_capability(con, 10_000)
    row = stats.as_dict()
    assert (row["terminal"], row["completed"], row["first_attempt"], row["retried"], row["overload"]) == (3, 2, 1, 1, 1)
    assert row["success_rate"] == 2 / 3 and row["retry_rate"] == 1 / 3 and row["throughput_per_s"] == 0.3
    assert row["p50_ms"] == 300 and 300 < row["p99_ms"] <= 500
    series = overview.series(con, 1_000)
    assert series == {"demo.echo": [(1_000, 2, 2), (2_000, 1, 0)]}
    svg = overview.sparkline(series["demo.echo"], since_ms=0, until_ms=3_000, bucket_ms=1_000)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2


def test_usage_per_capability_with_the_cost_per_success(tmp_path: Path) -> None:
    from reach.records import Usage

    used = Usage(input_tokens=100, output_tokens=50, model="m", cost_micros=2_000, currency="USD")
    receipts = [
        _receipt("a", Status.COMPLETED, 1_100).model_copy(update={"usage": used}),
        _receipt("b", Status.FAILED, 1_200).model_copy(update={"usage": used}),
        _receipt("c", Status.COMPLETED, 1_300),  # reported nothing: not in the usage view
    ]
    con = analytics.load(iter([analytics.flatten(r) for r in receipts]), tmp_path)
    [row] = [u.as_dict() for u in overview.usage(con)]
    assert row == {"capability": "demo.echo", "requests": 2, "input_tokens": 200, "output_tokens": 100,
                   "cost": 0.004, "currency": "USD", "cost_per_success": 0.004}
