"""What the demo shows: a live table in a terminal, a compact line every few seconds in a log, a summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from reach.core.healthmodel.fields import breaker, share
from reach.tooling.demo.tally import OUTCOME_COLUMNS, Rate, Row, Snapshot, percentile
from reach.tooling.demo.traffic import EXPECTED

_HEADERS = {"dead_lettered": "dead-lettered"}


def ms(value: int | None) -> str:
    """A latency for humans: `14 ms`, `1.25 s`, `-` when there is none yet."""
    if value is None:
        return "-"
    return f"{value} ms" if value < 1000 else f"{value / 1000:.2f} s"


def short_instance(instance_id: str) -> str:
    """`host-1234-01abcdef` -> `1234-01abcdef` (the pid and the random suffix tell instances apart)."""
    parts = instance_id.rsplit("-", 2)
    return "-".join(parts[-2:]) if len(parts) == 3 and parts[-2].isdigit() else instance_id


@dataclass
class Frame:
    """Everything one refresh shows besides the tally."""

    namespace: str
    elapsed: float
    duration: float | None
    rate: float
    routed_per_s: float
    phase: str


class Dashboard:
    """Renders snapshots; remembers the registry rows it last saw (the router may be gone at the end)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.instances: dict[str, dict[str, Any]] = {}
        self._rates: dict[str, Rate] = {}

    def seen_agents(self, rows: list[dict[str, Any]] | None) -> None:
        for row in rows or []:
            self.instances[row["instance_id"]] = row

    # -- live ----------------------------------------------------------------------------------------
    def live(self, snap: Snapshot, frame: Frame) -> RenderableType:
        rates = {name: self._rates.setdefault(name, Rate()).update(row.counts["routed"])
                 for name, row in snap.by_capability.items()}
        return Group(Text(self.headline(snap, frame)), self.capability_table(snap, rates),
                     self.instance_table(snap))

    def headline(self, snap: Snapshot, frame: Frame) -> str:
        hint = f" of {frame.duration:.0f}s" if frame.duration else ""
        hint += " · Ctrl-C to stop" if frame.phase == "traffic" else " · Ctrl-C to skip"
        return (f"reach demo · namespace {frame.namespace} · {frame.phase} · {frame.elapsed:.0f}s{hint}\n"
                f"sent {snap.sent} ({frame.rate:g}/s) · routed {frame.routed_per_s:.1f}/s · "
                f"in flight {snap.pending} · latency p50 {ms(percentile(snap.latencies_ms, 0.5))} · "
                f"p99 {ms(percentile(snap.latencies_ms, 0.99))}")

    def compact(self, snap: Snapshot, frame: Frame) -> str:
        """One line for logs and pipes (no live table when stdout is not a terminal)."""
        t = snap.totals
        counts = " ".join(f"{_HEADERS.get(c, c)}={t[c]}" for c in OUTCOME_COLUMNS)
        return (f"[{frame.elapsed:5.0f}s] {frame.phase}: sent={snap.sent} routed/s={frame.routed_per_s:.1f} "
                f"{counts} in_flight={snap.pending} p50={ms(percentile(snap.latencies_ms, 0.5))} "
                f"p99={ms(percentile(snap.latencies_ms, 0.99))}")

    def capability_table(self, snap: Snapshot, rates: dict[str, float] | None = None) -> Table:
        table = Table(title="by capability", title_justify="left")
        table.add_column("capability")
        if rates is not None:
            table.add_column("routed/s", justify="right")
        for column in OUTCOME_COLUMNS:
            table.add_column(_HEADERS.get(column, column), justify="right")
        table.add_column("p50", justify="right")
        table.add_column("p99", justify="right")
        for name, row in sorted(snap.by_capability.items()):
            rate = [] if rates is None else [f"{rates.get(name, 0.0):.1f}"]
            table.add_row(name, *rate, *_counts(row), ms(row.p(0.5)), ms(row.p(0.99)))
        return table

    def instance_table(self, snap: Snapshot) -> Table:
        table = Table(title="by instance (agent SDK receipts; routed = picked by the router; breaker and ok 1m "
                            "from <ns>.health)", title_justify="left")
        for column in ("agent", "instance", "region", "state", "load", "breaker"):
            table.add_column(column)
        table.add_column("ok 1m", justify="right")
        for column in ("routed", "completed", "failed", "retried"):
            table.add_column(column, justify="right")
        table.add_column("p50", justify="right")
        table.add_column("p99", justify="right")
        ids = sorted(set(snap.by_instance) | set(self.instances),
                     key=lambda i: (self.instances.get(i, {}).get("agent_id", ""), self.instances.get(i, {})
                                    .get("region") or "", i))
        for instance_id in ids:
            info = self.instances.get(instance_id, {})
            row = snap.by_instance.get(instance_id, Row())
            load = info.get("load")
            table.add_row(str(info.get("agent_id", "?")).removeprefix("agent://"), short_instance(instance_id),
                          info.get("region") or "-", info.get("state", "-"),
                          f"{load:.0%}" if isinstance(load, (int, float)) else "-", breaker(info),
                          share(info.get("success_1m")),
                          *(str(row.counts[c]) for c in ("routed", "completed", "failed", "retried")),
                          ms(row.p(0.5)), ms(row.p(0.99)))
        return table

    # -- summary -------------------------------------------------------------------------------------
    def summary(self, snap: Snapshot, *, namespace: str, traffic_s: float, rate: float,
                commands: list[str], log_dir: str) -> None:
        c = self.console
        t = snap.totals
        finished = snap.sent - snap.pending
        c.rule(f"reach demo summary · namespace {namespace}")
        c.print(self.capability_table(snap))
        c.print(self.instance_table(snap))
        c.print(self.kind_table(snap))
        totals = " · ".join(f"{_HEADERS.get(col, col)} {t[col]}" for col in OUTCOME_COLUMNS)
        c.print(f"totals: sent {snap.sent} in {traffic_s:.1f}s ({rate:g} req/s) · {totals}", highlight=False)
        rate_ok = t["completed"] / finished if finished else 0.0
        c.print(f"success rate: {rate_ok:.1%} completed ({t['completed']} of {finished} finished requests; the mix "
                f"fails some on purpose) · as planned: {snap.as_planned}/{snap.as_planned + snap.unplanned} ended as "
                "their kind expects"
                + (f" · {snap.pending} still in flight at exit" if snap.pending else ""), highlight=False)
        completed = snap.completed_latencies_ms
        c.print(f"latency created_at -> terminal receipt: p50 {ms(percentile(snap.latencies_ms, 0.5))} · "
                f"p99 {ms(percentile(snap.latencies_ms, 0.99))} · completed only: "
                f"p50 {ms(percentile(completed, 0.5))} · p99 {ms(percentile(completed, 0.99))} · "
                f"max {ms(max(completed) if completed else None)}", highlight=False)
        pinned = sum(1 for instances in snap.sessions.values() if len(instances) == 1)
        c.print(f"sessions: {len(snap.sessions)} session keys, {pinned} stayed on one instance "
                "(session affinity)", highlight=False)
        if snap.fanout:
            c.print("fan-out: order events delivered to each subscriber: " + "; ".join(
                f"{agent} {_endings(ended)}" for agent, ended in sorted(snap.fanout.items())), highlight=False)
        for to, served in sorted(snap.fallback.items()):
            c.print(f"fallback: {sum(served.handed_on.values())} requests handed on to their POLICY fallback {to} "
                    f"({_endings(served.handed_on)}), served by {to}: {_endings(served.ended) or 'none ended yet'}",
                    highlight=False)
        c.print("look deeper (the records stay in the broker):", highlight=False)
        for line in commands:
            c.print(f"  {line}", highlight=False, markup=False)
        c.print(f"logs of the router and agents: {log_dir}", highlight=False)

    def kind_table(self, snap: Snapshot) -> Table:
        table = Table(title="by kind of traffic: did each end as it should?", title_justify="left")
        for column in ("kind", "sent", "expected", "ended as", "as expected"):
            table.add_column(column, justify="right" if column in ("sent", "as expected") else "left")
        for kind, expected in EXPECTED.items():
            sent = snap.sent_by_kind.get(kind, 0)
            if not sent:
                continue
            ended = snap.by_kind.get(kind, Counter())
            done = sum(ended.values())
            table.add_row(kind, str(sent), expected.value,
                          _endings(ended) or "-",
                          f"{ended[expected.value]}/{done}")
        return table


def _endings(counts: Counter[str]) -> str:
    return ", ".join(f"{status} {n}" for status, n in counts.most_common())


def _counts(row: Row) -> list[str]:
    return [str(row.counts[c]) for c in OUTCOME_COLUMNS]
