"""The bench's one table (rich) and its JSON: rows per mode, the two ratios, and the targets they are held to."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reach.bench.results import ModeResult

TARGETS = {
    "route_throughput": ">= 5,000 envelopes/s",
    "route_over_raw": ">= 0.35",
    "route_over_faust": ">= 2",
    "round_trip_2000_p99_ms": "<= 100",
    "router_hop_2000_p99_ms": "<= 20",
    "scoring_100_p99_ms": "<= 0.5",
}


@dataclass
class Report:
    """Everything one `reach bench` run measured, with the conditions it ran under."""

    results: list[ModeResult]
    conditions: dict[str, Any] = field(default_factory=dict)

    def find(self, mode: str) -> ModeResult | None:
        return next((r for r in self.results if r.mode == mode), None)

    def ratios(self) -> dict[str, float | None]:
        route, raw, faust = self.find("route"), self.find("raw"), self.find("faust")

        def ratio(a: ModeResult | None, b: ModeResult | None) -> float | None:
            return round(a.throughput / b.throughput, 3) if a and b and b.throughput else None

        return {"route_over_raw": ratio(route, raw), "route_over_faust": ratio(route, faust)}

    def checks(self) -> dict[str, float | None]:
        """The measured value behind every target (None when that mode did not run)."""
        route, rt, scoring = self.find("route"), self.find("round trip 2000/s"), self.find("scoring 100")
        hop = rt.steps.get("router hop") if rt else None
        return {
            "route_throughput": round(route.throughput) if route else None,
            **self.ratios(),
            "round_trip_2000_p99_ms": rt.latency.p99 if rt and rt.latency else None,
            "router_hop_2000_p99_ms": hop.p99 if hop else None,
            "scoring_100_p99_ms": round(scoring.latency.p99, 3) if scoring and scoring.latency else None,
        }

    def as_dict(self) -> dict[str, Any]:
        return {"conditions": self.conditions, "modes": [r.as_dict() for r in self.results],
                "ratios": self.ratios(), "targets": TARGETS, "measured": self.checks()}

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")


def conditions(**extra: Any) -> dict[str, Any]:
    """Machine and load at the time of the run (the figures are only comparable within one run)."""
    import os

    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine(),
            "loadavg_1_5_15": [round(x, 2) for x in load], **extra}


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if value < 1 else f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def render(report: Report, console: Console | None = None) -> None:
    """Print the table, the ratios and the targets with what was measured against them."""
    console = console or Console()
    table = Table(title="reach bench", show_lines=False)
    for col in ("mode", "msgs", "msgs/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "CPU s/1k", "lost", "dup",
                "latency from -> to"):
        table.add_column(col, justify="left" if col in ("mode", "latency from -> to") else "right")
    for r in report.results:
        lat = r.latency
        p50, p95, p99, top = (lat.p50, lat.p95, lat.p99, lat.max) if lat else (None, None, None, None)
        table.add_row(r.mode, f"{r.messages:,}", f"{r.throughput:,.0f}", _ms(p50), _ms(p95), _ms(p99), _ms(top),
                      "-" if r.cpu_per_1k is None else f"{r.cpu_per_1k:.3f}",
                      str(r.lost), str(r.duplicated), lat.basis if lat else "-",
                      style="red" if r.lost else None)
        for name, step in r.steps.items():
            table.add_row(f"  └ {name}", "", "", _ms(step.p50), _ms(step.p95), _ms(step.p99), _ms(step.max),
                          "", "", "", step.basis, style="dim")
    console.print(table)
    measured = report.checks()
    for key, target in TARGETS.items():
        console.print(f"  {key:<24} {target:<22} measured {measured.get(key)}")
    notes = [f"  {r.mode}: {r.notes}" for r in report.results if r.notes]
    if notes:
        console.print("[dim]" + "\n".join(notes) + "[/]")
    console.print(f"[dim]  conditions: {report.conditions}[/]")
