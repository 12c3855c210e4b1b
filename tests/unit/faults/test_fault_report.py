"""Saved `reach faults run --json` lines render as the Markdown table of docs/reliability.md."""

from __future__ import annotations

from reach.tooling.faults.report import TABLE_COLUMNS, markdown


def test_one_row_per_scenario_with_every_figure_outcome_and_verdict() -> None:
    ok = {"scenario": "router-sigkill", **{c: 0 for c in TABLE_COLUMNS}, "sent": 10, "recovery_s": 1.5,
          "p99_ms": 120.0, "drained_s": None, "outcomes": {"COMPLETED": 10}, "ok": True, "misses": []}
    bad = {**ok, "scenario": "leader-sigkill", "lost": 2, "ok": False, "misses": ["2 lost"]}
    lines = markdown([ok, bad]).splitlines()
    assert len(lines) == 4
    assert lines[0].split(" | ")[1:3] == ["sent", "acked"]
    assert lines[2].startswith("| router-sigkill | 10 | 0 |")
    assert "| 1.5 |" in lines[2] and "| 120 |" in lines[2] and "| - |" in lines[2]
    assert lines[2].endswith("| COMPLETED 10 | ok |")
    assert lines[3].endswith("| 2 lost |")
