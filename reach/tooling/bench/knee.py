"""Mode `knee`: the highest offered rate a round-trip set-up serves within the service level of
`reach.tooling.bench.slo`.

For each set-up (one no-op agent; two `examples/echo_agent.py` instances) the stream app and the agents
run as child processes, as in the round trip. `reach.tooling.bench.bisection.search` picks the rates; each step
sends open-loop at its rate for a warm-up, then for `seconds` measured, waits until every measured
message has a terminal receipt, and is judged by the receipts alone (the status table is not in the
criterion). Before the next step the stack must be idle again (its processes under a quarter of a
core), so a failed step's backlog does not count against the next one. The search is repeated;
`knee_rps` is the lowest knee of the repeats.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any

from reach.tooling.bench import costs, cpu, round_trip
from reach.tooling.bench.bisection import Knee, search
from reach.tooling.bench.collector import Collector
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.round_trip import Setup, Stack, StreamApp, decode_receipts, send_open_loop, workers_cpu
from reach.tooling.bench.slo import CRITERION, ReceiptBook, Verdict, judge
from reach.tooling.bench.workspace import BUDGET_MS, Workspace


@dataclass(frozen=True)
class KneeConfig:
    """Search bounds and step lengths; the defaults are the measurement, `quick()` only checks that it runs."""

    low: float = 50.0  # known good (checked only when every step above it fails)
    high: float = 4_000.0  # known bad (checked only when every step below it passes)
    resolution: float = 0.1  # stop when the bracket is narrower than 10%
    seconds: float = 20.0  # measured, open-loop, per step
    warmup: float = 3.0  # seconds at the step's rate before measuring
    repeats: int = 2
    setups: tuple[str, ...] = tuple(round_trip.SETUPS)
    drain_timeout: float = 60.0
    settle_timeout: float = 120.0

    @classmethod
    def quick(cls, **changes: Any) -> KneeConfig:
        base: dict[str, Any] = {"low": 20.0, "high": 25.0, "resolution": 0.5, "seconds": 1.0, "warmup": 0.5,
                                "repeats": 1, "drain_timeout": 30.0, "settle_timeout": 10.0}
        return cls(**{**base, **changes})


@dataclass
class Step:
    """One rate of the search, as measured."""

    rate: float
    verdict: Verdict
    cpu_per_1k: dict[str, float | None]  # per process
    workers_per_1k: float | None  # router + agents
    drained: bool
    settle_s: float
    settled: bool  # the stack was idle again before the next step (else the next step met its backlog)
    costs: dict[str, float | None] = field(default_factory=dict)  # broker requests, Redis commands per request

    def as_dict(self) -> dict[str, Any]:
        v = self.verdict
        return {"rate": self.rate, "passed": v.passed, "messages": v.messages,
                "completed_fraction": round(v.completed_fraction, 5), "outcomes": v.outcomes,
                "latency": asdict(v.latency) if v.latency else None, "cpu_per_1k": self.cpu_per_1k,
                "drained": self.drained, "settle_s": round(self.settle_s, 1), "settled": self.settled,
                "costs": self.costs}


@dataclass
class Run:
    """One search of one set-up, with the load average before and after it."""

    knee: Knee
    steps: list[Step]
    loadavg_before: list[float]
    loadavg_after: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"knee_rps": self.knee.knee, "failed_at_rps": self.knee.failed_at, "bracket": self.knee.bracket,
                "resolution": self.knee.resolution, "loadavg_1_5_15_before": self.loadavg_before,
                "loadavg_1_5_15_after": self.loadavg_after, "seconds": round(self.seconds),
                "steps": [s.as_dict() for s in self.steps]}


@dataclass
class Search:
    """Every repeat of the search for one set-up (or why it could not run)."""

    setup: str
    runs: list[Run] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    skipped: str | None = None

    @property
    def knee_rps(self) -> float | None:
        """The lowest knee of the repeats; None when a repeat found none in range, or nothing ran."""
        knees = [r.knee.knee for r in self.runs]
        return None if not knees or any(k is None for k in knees) else min(k for k in knees if k is not None)

    def as_dict(self) -> dict[str, Any]:
        return {"setup": self.setup, "knee_rps": self.knee_rps, "criterion": CRITERION, "lost": self.lost,
                "duplicated": self.duplicated, "skipped": self.skipped, "runs": [r.as_dict() for r in self.runs]}

    def row(self) -> ModeResult:
        """The set-up's line in the main table: the knee, with the step that passed there."""
        mode = f"knee {self.setup}"
        if self.skipped:
            return ModeResult.skip(mode, self.skipped)
        at = self.knee_step()
        knee = self.knee_rps
        runs = "; ".join(f"{r.knee.bracket} at load {r.loadavg_before[0]:.1f}" for r in self.runs)
        return ModeResult(
            mode=mode, messages=sum(s.verdict.messages for r in self.runs for s in r.steps),
            throughput=knee or 0.0, latency=at.verdict.latency if at else None,
            cpu_per_1k=at.workers_per_1k if at else None, lost=self.lost, duplicated=self.duplicated,
            offered_rate=knee, cpu_by_process=at.cpu_per_1k if at else {}, figures=dict(at.costs) if at else {},
            notes=(f"knee_rps {knee:g}" if knee is not None
                   else f"no knee in range (figures: the lowest rate tried, {at.rate:g}/s)" if at
                   else "no knee in range")
            + f" (lowest of {len(self.runs)}; resolution {self.runs[0].knee.resolution:.0%}): {runs}",
        )

    def knee_step(self) -> Step | None:
        """The passing step at the knee; with no knee in range, the lowest rate tried (how far off it was)."""
        knee = self.knee_rps
        steps = [s for r in self.runs for s in r.steps]
        if knee is None:
            return min(steps, key=lambda s: s.rate, default=None)
        return next((s for s in steps if s.rate == knee and s.verdict.passed), None)


def run(ws: Workspace, config: KneeConfig) -> list[Search]:
    """Search every configured set-up in turn, against one stream app in the workspace's namespace."""
    out = [Search(name, skipped=round_trip.SETUPS[name].missing()) for name in config.setups]
    if all(s.skipped for s in out):
        return out
    layouts = dict.fromkeys((round_trip.SETUPS[s.setup].roles, round_trip.SETUPS[s.setup].redis_masters)
                            for s in out if not s.skipped)
    for roles, masters in layouts:  # one stream app per process layout and Redis, shared by its set-ups
        with ExitStack() as stack:
            url = stack.enter_context(round_trip.redis_cluster(masters)) if masters else None
            app = stack.enter_context(round_trip.stream_app(ws, roles, redis_url=url))
            collector = Collector(ws).start()
            try:
                for result in out:
                    setup = round_trip.SETUPS[result.setup]
                    if not result.skipped and (setup.roles, setup.redis_masters) == (roles, masters):
                        _search(ws, app, collector, setup, config, result)
            finally:
                collector.stop()
    return out


def _search(ws: Workspace, app: StreamApp, collector: Collector, setup: Setup, config: KneeConfig,
            result: Search) -> None:
    book = ReceiptBook()
    pending: dict[str, int] = {}
    with round_trip.stack(ws, app, setup) as running:
        for repeat in range(config.repeats):
            started = time.monotonic()
            steps: list[Step] = []

            def passes(rate: float, repeat: int = repeat, steps: list[Step] = steps) -> bool:
                step = _step(ws, collector, book, running, setup, config, rate=rate,
                             tag=f"k{list(round_trip.SETUPS).index(setup.name)}r{repeat}s{len(steps)}", pending=pending)
                steps.append(step)
                return step.verdict.passed

            before = load()
            knee = search(passes, low=config.low, high=config.high, resolution=config.resolution)
            result.runs.append(Run(knee, steps, before, load(), time.monotonic() - started))
        # a message still open has its terminal status by its deadline (EXPIRED at worst): wait that long, no less
        last_deadline = (max(pending.values(), default=0) + BUDGET_MS) / 1000 + 15 - time.time()
        _wait_terminal(collector, book, pending, max(config.drain_timeout, last_deadline), idle_cutoff=None)
    result.lost, result.duplicated = len(book.missing(pending)), book.duplicated


def _step(ws: Workspace, collector: Collector, book: ReceiptBook, running: Stack, setup: Setup, config: KneeConfig,
          *, rate: float, tag: str, pending: dict[str, int]) -> Step:
    for child in [*running.routers.values(), *running.agents]:
        if not child.alive():  # a search against a dead process would only find a lower "knee"
            raise RuntimeError(f"{child.name} exited during the knee search:\n{child.tail()}")
    warm = send_open_loop(ws, f"{tag}w", rate, max(int(rate * config.warmup), 5), setup.capability)
    _wait_terminal(collector, book, warm, config.drain_timeout)
    spent_before, before = running.read_costs(), cpu.read(running.processes())
    created = send_open_loop(ws, f"{tag}m", rate, max(int(rate * config.seconds), 10), setup.capability)
    time.sleep(0.5)  # let the last sends finish before this process starts decoding receipts
    drained = _wait_terminal(collector, book, created, config.drain_timeout)
    per_process = cpu.per_1k(before, cpu.read(running.processes()), len(created))
    spent = costs.per_request(spent_before, running.read_costs(opening=False), len(created), ws.namespace)
    pending.update({m: created[m] for m in book.missing(created)})  # looked at again after the last step
    settle_s, settled = settle(running.workers(), config.settle_timeout)
    return Step(rate, judge(book, created), per_process, workers_cpu(per_process, set(running.workers())), drained,
                settle_s, settled, spent)


def _take(collector: Collector, book: ReceiptBook) -> None:
    book.add(decode_receipts(collector.take().receipts))


def _wait_terminal(collector: Collector, book: ReceiptBook, created: dict[str, int], timeout: float,
                   idle_cutoff: float | None = 20.0) -> bool:
    """Until every id has a terminal receipt, the timeout passes, or nothing changed for `idle_cutoff` s."""
    deadline = time.monotonic() + timeout
    waiting, last_change = set(created), time.monotonic()
    while time.monotonic() < deadline and (idle_cutoff is None or time.monotonic() - last_change < idle_cutoff):
        _take(collector, book)
        still = book.missing(waiting)
        if not still:
            return True
        if len(still) != len(waiting):
            waiting, last_change = still, time.monotonic()
        time.sleep(0.1)
    return False


def settle(processes: Mapping[str, int | None], timeout: float, *, idle_cores: float = 0.25,
           window: float = 1.0) -> tuple[float, bool]:
    """Wait until `processes` together use under `idle_cores` over `window`: (seconds waited, idle)."""
    started = time.monotonic()
    before = cpu.read(processes)
    while time.monotonic() - started < timeout:
        time.sleep(window)
        after = cpu.read(processes)
        used = sum((after.get(k) or 0.0) - (v or 0.0) for k, v in before.items())
        if used < idle_cores * window:
            return time.monotonic() - started, True
        before = after
    return time.monotonic() - started, False


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
