"""The bench's tables (rich) and its JSON: rows per mode, CPU per process, the knees, ratios, and the targets."""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from reach.tooling.bench import imports, peers
from reach.tooling.bench.knee import Search, Step
from reach.tooling.bench.results import ModeResult

TARGETS = {
    "idle_cpu_pct_of_a_core": "<= 5 (router + one agent + broker, no traffic)",
    "round_trip_echo_x2_100_completed_fraction": "1.0 (0 OVERLOAD)",
    "round_trip_echo_x2_300_completed_fraction": "1.0 (0 OVERLOAD)",
    "round_trip_200_completed_p50_ms": "<= 15",
    "round_trip_200_broker_requests_per_request": "<= 3 (issue 23's target at 1,000 req/s)",
    "knee_noop_broker_requests_per_request": "<= 3",
    "round_trip_200_redis_commands_per_request": "(reported: where Redis's load comes from)",
    "round_trip_200_redis_bytes_per_1k_requests": "<= 1,163,000 (4 GiB at 2,000 req/s, 30-min registers)",
    "round_trip_200_completed_p99_ms": "<= 60",
    "round_trip_200_row_after_receipt_p99_ms": "<= 100",
    "router_hop_1000_p99_ms": "<= 20",
    "knee_noop_rps": ">= 2,000",
    "knee_echo_x2_rps": ">= 1,000 (issue 23)",
    "knee_noop_max_ms": "<= 1,000 (the slowest request of the step at the knee; issue 23: at 90% of it)",
    "knee_noop_cpu_ms_per_request": "<= 0.8 (router, agents and broker JVM at the knee; issue 23)",
    "round_trip_1000_broker_requests_per_request": "<= 3 (issue 23)",
    "route_2_workers_throughput": ">= 8,000 envelopes/s",
    "route_throughput": ">= 8,000 envelopes/s (stretch)",
    "route_over_faust": ">= 3",
    "status_scale_rss_mib": "< 1,024",
    "status_scale_recovery_s": "< 60",
    "scoring_100_p99_ms": "<= 0.5",
    "gateway_accepted_rps": ">= 1,000 (one process)",
    "gateway_500_p99_ms": "<= 50",
    "sdk_publish_rps": ">= 20,000 envelopes/s from one SDK process, every ack checked (issue 36)",
}
"""Issue 10's targets that `reach bench` measures (the demo's latency is `reach demo`'s), issue 13's and issue 23's."""


@dataclass(frozen=True)
class Target:
    """One row of issue 36's targets: what is measured, the target, the `measured` key and the command."""

    key: str
    measure: str
    target: str
    command: str


ISSUE_36 = (
    Target("knee_noop_rps", "`knee_rps`, no-op agent", ">= 2,000 (stretch 5,000)",
           "reach bench --modes knee --knee-setups noop"),
    Target("knee_echo_x2_rps", "`knee_rps`, echo x2", ">= 1,500", 'reach bench --modes knee --knee-setups "echo x2"'),
    Target("knee_noop_cpu_ms_per_request", "product CPU per request at the knee (router + agent + broker JVM), ms",
           "<= 0.8 (stretch 0.3)", "reach bench --modes knee --knee-setups noop"),
    Target("knee_noop_broker_requests_per_request", "broker requests per request at the knee", "<= 2",
           "reach bench --modes knee --knee-setups noop"),
    Target("knee_noop_redis_round_trips_per_request", "Redis round trips per request at the knee", "<= 0.5",
           "reach bench --modes knee --knee-setups noop"),
    Target("peers_reach_over_faststream", "Reach knee / FastStream request-reply knee, same run", ">= 4",
           "reach bench --modes peers"),
    Target("peers_reach_over_plain", "Reach knee / plain Kafka request-reply knee, same run", ">= 0.1 (1/10)",
           "reach bench --modes peers"),
    Target("sdk_publish_rps", "envelopes/s one SDK process publishes, acknowledged", ">= 20,000",
           "reach bench --modes publish"),
    Target("runtime_modules_importing_confluent_kafka",
           "runtime modules outside reach/kafka importing confluent_kafka", "0", "any `reach bench` run (static)"),
    Target("knee_noop_records_produced_per_request", "records produced per request at the knee (reported)",
           "(what the semantics need)", "reach bench --modes knee --knee-setups noop"),
    Target("knee_noop_records_decoded_per_request", "records decoded per request at the knee (reported)",
           "(what the semantics need)", "reach bench --modes knee --knee-setups noop"),
)
"""Issue 36's targets table (docs/performance.md, "Issue 36"): the report and `--json` carry it as measured."""

CLIENTS = frozenset({"bench", "client"})
"""The load generators' processes: their CPU is shown, never counted as the product's."""


@dataclass
class Report:
    """Everything one `reach bench` run measured, with the conditions it ran under."""

    results: list[ModeResult]
    knees: list[Search] = field(default_factory=list)
    conditions: dict[str, Any] = field(default_factory=dict)

    def find(self, mode: str) -> ModeResult | None:
        return next((r for r in self.results if r.mode == mode and not r.skipped), None)

    def ratios(self) -> dict[str, float | None]:
        route = self.find("route")

        def ratio(a: ModeResult | None, b: ModeResult | None) -> float | None:
            return round(a.throughput / b.throughput, 3) if a and b and b.throughput else None

        return {"route_over_raw": ratio(route, self.find("raw")), "route_over_faust": ratio(route, self.find("faust")),
                "route_over_quix": ratio(route, self.find("quix")),
                "route_2_workers_over_1": ratio(self.find("route 2 workers"), route)}

    def checks(self) -> dict[str, float | None]:
        """The measured value behind every target (None when that mode did not run)."""
        route, route2 = self.find("route"), self.find("route 2 workers")
        rt200, rt1000, scoring = self.find("round trip 200/s"), self.find("round trip 1000/s"), self.find("scoring 100")
        scale = self.find("status-scale")

        def step(r: ModeResult | None, name: str, q: str) -> float | None:
            lat = r.steps.get(name) if r else None
            return getattr(lat, q) if lat else None

        noop = next((k for k in self.knees if k.setup == "noop"), None)
        echo = next((k for k in self.knees if k.setup == "echo x2"), None)
        def done(mode: str) -> float | None:
            r = self.find(mode)
            return r.figures.get("completed_fraction") if r else None

        idle = self.find("idle")
        knee_row = self.find("knee noop")

        def figure(r: ModeResult | None, name: str) -> float | None:
            return r.figures.get(name) if r else None

        return {
            "idle_cpu_pct_of_a_core": idle.figures.get("cpu_pct_of_a_core") if idle else None,
            "round_trip_echo_x2_100_completed_fraction": done("round trip echo x2 100/s"),
            "round_trip_echo_x2_300_completed_fraction": done("round trip echo x2 300/s"),
            "round_trip_200_completed_p50_ms": step(rt200, "completed receipt", "p50"),
            "round_trip_200_completed_p99_ms": step(rt200, "completed receipt", "p99"),
            "round_trip_200_broker_requests_per_request": figure(rt200, "broker_requests_per_request"),
            "knee_noop_broker_requests_per_request": figure(knee_row, "broker_requests_per_request"),
            "round_trip_200_redis_commands_per_request": figure(rt200, "redis_commands_per_request"),
            "round_trip_200_redis_bytes_per_1k_requests": figure(rt200, "redis_bytes_per_1k_requests"),
            "round_trip_200_row_after_receipt_p99_ms": step(rt200, "status row after receipt", "p99"),
            "router_hop_1000_p99_ms": step(rt1000, "router hop", "p99"),
            "knee_noop_rps": noop.knee_rps if noop else None,
            "knee_echo_x2_rps": echo.knee_rps if echo else None,
            "knee_noop_max_ms": knee_row.latency.max if knee_row and knee_row.latency else None,
            "knee_noop_cpu_ms_per_request": _product_cpu_ms(knee_row),
            "round_trip_1000_broker_requests_per_request": figure(rt1000, "broker_requests_per_request"),
            "route_2_workers_throughput": round(route2.throughput) if route2 else None,
            "route_throughput": round(route.throughput) if route else None,
            "route_over_faust": self.ratios()["route_over_faust"],
            "status_scale_rss_mib": scale.figures.get("rss_mib") if scale else None,
            "status_scale_recovery_s": scale.figures.get("recovery_s") if scale else None,
            "scoring_100_p99_ms": round(scoring.latency.p99, 3) if scoring and scoring.latency else None,
            "gateway_accepted_rps": max((round(r.throughput) for r in self.results
                                         if r.mode.startswith("gateway ") and not r.skipped), default=None),
            "gateway_500_p99_ms": (round(gw500.latency.p99, 1) if (gw500 := self.find("gateway 500/s"))
                                   and gw500.latency else None),
            "sdk_publish_rps": self.sdk_publish_rps(),
        }

    def sdk_publish_rps(self) -> float | None:
        """The best rate of the SDK's pipelined publishers (`send_many`, AsyncClient) with nothing unacknowledged."""
        from reach.tooling.bench.publish import SDK_ROWS

        rates = [r.throughput for m in SDK_ROWS if (r := self.find(m)) is not None and not r.lost]
        return round(max(rates)) if rates else None

    def peers(self) -> dict[str, Any] | None:
        """Reach's no-op knee beside the peers' (mode `peers`): knees, ratios and each one's figures at its knee;
        None when no peer ran."""
        if not any(s.setup in peers.PEERS for s in self.knees):
            return None
        shown = [s for s in self.knees if s.setup in (peers.REACH, *peers.PEERS)]
        knees = {s.setup: s.knee_rps for s in shown}
        at = {s.setup: knee_step(s) for s in shown}
        return {"knee_rps": knees, "ratios": peers.ratios(knees),
                "skipped": {s.setup: s.skipped for s in shown if s.skipped},
                "cpu_ms_per_request_at_knee": {k: (dict(v.cpu_per_1k) if v else None) for k, v in at.items()},
                "product_cpu_ms_per_request_at_knee": {k: product_cpu_ms(v.cpu_per_1k) if v else None
                                                       for k, v in at.items()},
                "figures_at_knee": {k: (dict(v.costs) if v else None) for k, v in at.items()},
                "loadavg_1_5_15_before": {s.setup: [r.loadavg_before for r in s.runs] for s in shown}}

    def issue_36(self) -> list[dict[str, Any]]:
        """Issue 36's targets with what this run measured (None: its mode did not run)."""
        measured = self.issue_36_measured()
        return [{"key": t.key, "measure": t.measure, "target": t.target, "measured": measured.get(t.key),
                 "command": t.command} for t in ISSUE_36]

    def issue_36_measured(self) -> dict[str, float | None]:
        noop = self.find("knee noop")
        ratios = peers.ratios({s.setup: s.knee_rps for s in self.knees})
        checks = self.checks()

        def figure(name: str) -> float | None:
            return noop.figures.get(name) if noop else None

        return {
            "knee_noop_rps": checks["knee_noop_rps"], "knee_echo_x2_rps": checks["knee_echo_x2_rps"],
            "knee_noop_cpu_ms_per_request": checks["knee_noop_cpu_ms_per_request"],
            "knee_noop_broker_requests_per_request": figure("broker_requests_per_request"),
            "knee_noop_redis_round_trips_per_request": figure("redis_round_trips_per_request"),
            "peers_reach_over_faststream": ratios["reach_over_faststream"] if self.peers() else None,
            "peers_reach_over_plain": ratios["reach_over_plain"] if self.peers() else None,
            "sdk_publish_rps": self.sdk_publish_rps(),
            "runtime_modules_importing_confluent_kafka": len(imports.offenders()),
            "knee_noop_records_produced_per_request": figure("records_produced_per_request"),
            "knee_noop_records_decoded_per_request": figure("records_decoded_per_request"),
        }

    def as_dict(self) -> dict[str, Any]:
        return {"conditions": self.conditions, "modes": [r.as_dict() for r in self.results],
                "knee_rps": {s.setup: s.knee_rps for s in self.knees}, "knee": [s.as_dict() for s in self.knees],
                "cpu_per_1k_by_process": {r.mode: r.cpu_by_process for r in self.results if r.cpu_by_process},
                "status_scale": self._status_scale(), "peers": self.peers(),
                "ratios": self.ratios(), "targets": TARGETS, "measured": self.checks(),
                "issue_36": self.issue_36(), "runtime_modules_importing_confluent_kafka": list(imports.offenders()),
                "sdk_publish_rps": self.sdk_publish_rps()}

    def _status_scale(self) -> dict[str, Any] | None:
        """The status-scale figures; a skipped run says why; None when the mode did not run."""
        row = next((r for r in self.results if r.mode == "status-scale"), None)
        if row is None:
            return None
        return {"skipped": row.skipped} if row.skipped else dict(row.figures)

    def write_json(self, path: Path) -> None:
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n", encoding="utf-8")


def _product_cpu_ms(row: ModeResult | None) -> float | None:
    """CPU ms per request of the product's processes in a row (everything but the load generators: the bench's
    own sender and collector, a peer's client, and what they spawned); None when a process's CPU could not be
    read (a remote broker)."""
    return product_cpu_ms(row.cpu_by_process) if row is not None else None


def product_cpu_ms(by_process: dict[str, float | None]) -> float | None:
    """The sum over the processes that are not load generators (CPU s per 1,000 = ms per request)."""
    if not by_process:
        return None
    product = [v for k, v in by_process.items() if k.split("/")[0] not in CLIENTS]
    return None if any(v is None for v in product) else round(sum(v for v in product if v is not None), 3)


def knee_step(search: Search) -> Step | None:
    """The passing step at a search's knee (or its lowest rate when none passed): the figures shown for it."""
    return search.knee_step()


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
    _cpu_table(report, console)
    _cost_table(report, console)
    _knee_table(report, console)
    _peers_table(report, console)
    _issue_36_table(report, console)
    measured = report.checks()
    for key, target in TARGETS.items():
        console.print(f"  {key:<24} {target:<22} measured {measured.get(key)}")
    notes = [f"  {r.mode}: {r.notes}" for r in report.results if r.notes]
    if notes:
        console.print("[dim]" + "\n".join(notes) + "[/]")
    console.print(f"[dim]  conditions: {report.conditions}[/]")


def _cpu_table(report: Report, console: Console) -> None:
    """CPU seconds per 1,000 messages of each process, side by side for the modes that read them."""
    rows = [r for r in report.results if r.cpu_by_process]
    if not rows:
        return
    labels: list[str] = []
    for r in rows:
        labels.extend(k for k in r.cpu_by_process if k not in labels)
    table = Table(title="CPU s per 1,000 messages, by process (n/a: not measurable here)")
    table.add_column("mode")
    for label in labels:
        table.add_column(label, justify="right")
    for r in rows:
        cells = []
        for label in labels:
            value = r.cpu_by_process.get(label, "")
            cells.append("n/a" if value is None else value if isinstance(value, str) else f"{value:.3f}")
        table.add_row(r.mode, *cells)
    console.print(table)


COST_COLUMNS = (("records", "records_produced_per_request"), ("decoded", "records_decoded_per_request"),
                ("Redis RT", "redis_round_trips_per_request"), ("broker req", "broker_requests_per_request"),
                ("Produce", "broker_Produce_per_request"),
                ("Fetch", "broker_Fetch_per_request"), ("OffsetCommit", "broker_OffsetCommit_per_request"),
                ("Heartbeat", "broker_Heartbeat_per_request"), ("Metadata", "broker_Metadata_per_request"),
                ("other", "broker_other_per_request"), ("Redis cmds", "redis_commands_per_request"),
                ("Redis B/1k", "redis_bytes_per_1k_requests"))


def _cost_table(report: Report, console: Console) -> None:
    """Broker requests (by type) and Redis commands per request, for the modes that read them."""
    rows = [r for r in report.results if any(key in r.figures for _, key in COST_COLUMNS)]
    if not rows:
        return
    table = Table(title="per request: records produced (topic end offsets) and decoded, Redis round trips (the "
                  "processes' own count), broker requests by type (read from the broker), Redis commands (INFO: "
                  "every client of that Redis)")
    table.add_column("mode")
    for title, _ in COST_COLUMNS:
        table.add_column(title, justify="right")
    for r in rows:
        cells = [r.figures.get(key) for _, key in COST_COLUMNS]
        table.add_row(r.mode, *("-" if v is None else f"{v:,.2f}" if v < 100 else f"{v:,.0f}" for v in cells))
    console.print(table)


def _knee_table(report: Report, console: Console) -> None:
    if not report.knees:
        return
    table = Table(title="knee search: highest rate with >= 99.9% COMPLETED and COMPLETED receipt p99 <= 100 ms")
    for col in ("set-up", "knee_rps", "run", "bracket (pass, fail)", "resolution", "steps", "load avg", "seconds"):
        table.add_column(col, justify="left" if col in ("set-up", "bracket (pass, fail)") else "right")
    for search in report.knees:
        if search.skipped:
            table.add_row(search.setup, "-", "", f"skipped: {search.skipped}", "", "", "", "")
            continue
        for i, run in enumerate(search.runs):
            table.add_row(search.setup if i == 0 else "", _rps(search.knee_rps) if i == 0 else "", str(i + 1),
                          run.knee.bracket, f"{run.knee.resolution:.0%}", str(len(run.steps)),
                          f"{run.loadavg_before[0]:.2f} -> {run.loadavg_after[0]:.2f}" if run.loadavg_after else "",
                          f"{run.seconds:.0f}")
    console.print(table)


def _peers_table(report: Report, console: Console) -> None:
    """Reach's no-op knee beside the peers': the knee, the latency there, CPU per request by process, records and
    broker requests per request, and the ratios."""
    found = report.peers()
    if found is None:
        return
    table = Table(title="peers: request-reply knees in the same run, same criterion (CPU ms per request at the knee)")
    for col in ("set-up", "knee_rps", "p99 ms", "client/bench", "worker(s)", "broker JVM", "product CPU",
                "records", "broker req"):
        table.add_column(col, justify="left" if col == "set-up" else "right")
    for search in (s for s in report.knees if s.setup in (peers.REACH, *peers.PEERS)):
        if search.skipped:
            table.add_row(search.setup, "-", "", f"skipped: {search.skipped}", "", "", "", "", "")
            continue
        step = search.knee_step()
        cpu = step.cpu_per_1k if step else {}
        loads = [k for k in cpu if k.split("/")[0] in CLIENTS]
        product = [k for k in cpu if k.split("/")[0] not in CLIENTS and k != "broker JVM"]
        table.add_row("reach (noop)" if search.setup == peers.REACH else search.setup, _rps(search.knee_rps),
                      _ms(step.verdict.latency.p99 if step and step.verdict.latency else None),
                      _sum(cpu, loads), _sum(cpu, product), _sum(cpu, ["broker JVM"]),
                      _ms(product_cpu_ms(cpu)) if cpu else "-",
                      _ms(step.costs.get("records_produced_per_request") if step else None),
                      _ms(step.costs.get("broker_requests_per_request") if step else None))
    console.print(table)
    console.print("  " + ", ".join(f"{k} {'-' if v is None else f'{v:.3g}'}" for k, v in found["ratios"].items()))


def _sum(cpu: dict[str, float | None], labels: list[str]) -> str:
    values = [cpu.get(k) for k in labels]
    return "-" if not values else "n/a" if any(v is None for v in values) else _ms(sum(v or 0.0 for v in values))


def _issue_36_table(report: Report, console: Console) -> None:
    table = Table(title="issue 36: targets against this run (- : its mode did not run)")
    for col in ("measure", "target", "measured", "command"):
        table.add_column(col, justify="right" if col == "measured" else "left")
    for row in report.issue_36():
        value = row["measured"]
        table.add_row(row["measure"], row["target"], "-" if value is None else f"{value:,.3g}" if value < 100
                      else f"{value:,.0f}", row["command"])
    console.print(table)


def _rps(value: float | None) -> str:
    return "none in range" if value is None else f"{value:,.0f}"
