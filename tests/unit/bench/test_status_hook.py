"""The status-scale hook: the status engine's run becomes a row with its figures; without it, a clear skip."""

from __future__ import annotations

import sys
import types
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from reach.tooling.bench import suite


@dataclass(frozen=True)
class _Measured:
    messages: int = 1_000
    receipts: int = 4_000
    receipts_per_s: float = 8_000.0
    fold_rss_mib: float = 210.5
    disk_mib: float = 3.2
    rows: int = 1_000
    recovery_s: float = 1.5
    recovered_rows: int = 1_000

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def test_a_build_without_the_module_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suite, "STATUS_SCALE", "reach.tooling.bench.no_such_status_scale")
    (row,) = suite._status_scale(suite.BenchConfig(), None)
    assert row.skipped and "not available on this build" in row.notes and row.figures == {}


def test_the_status_engines_run_becomes_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    fake = types.ModuleType(suite.STATUS_SCALE)

    def status_scale(**kwargs: Any) -> _Measured:
        seen.update(kwargs)
        return _Measured()

    fake.status_scale = status_scale  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, suite.STATUS_SCALE, fake)
    (row,) = suite._status_scale(suite.BenchConfig(status_messages=1_000), None)
    assert seen["messages"] == 1_000
    assert row.mode == "status-scale" and row.throughput == 8_000 and row.lost == 0
    assert row.figures["rss_mib"] == 210.5 and row.figures["recovery_s"] == 1.5 and row.figures["disk_mib"] == 3.2


def test_rows_missing_after_recovery_are_lost() -> None:
    assert suite.status_row(asdict(_Measured(recovered_rows=990))).lost == 10
