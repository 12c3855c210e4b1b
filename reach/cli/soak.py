"""`reach soak --minutes N`: steady traffic with churn on the local stack, sampled for growth; fails on growth that
does not level off or on any lost message (docs/reliability.md, "Soak")."""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from pathlib import Path

import typer
from rich.table import Table

from reach.cli.common import Exit, console, err_console
from reach.settings import ReachSettings
from reach.tooling.local import LocalInfra
from reach.tooling.soak.growth import bounds_text
from reach.tooling.soak.runner import DEFAULT_RATE, Report, SoakSettings, run

HELP = (f"Run the router, a steady and a churned ledger agent and a private Redis on the local broker for N minutes "
        f"at --rate (default {DEFAULT_RATE:g}/s: half the no-op knee in docs/performance.md), with churn: the churned "
        "agent restarted every 2 minutes, the router restarted once at 25%, a drain at 40%, a canary from 45%. "
        "Every --interval it samples RSS and open fds per process, Redis memory and keys, the status table's "
        "RocksDB size, the run's topics and consumer lag. Exits 1 on any lost message, two different terminal "
        "receipts for one message, a churn step that did not happen, or a series whose least-squares line over "
        "the last half rises more than its bound across that half: " + bounds_text() + ".")


def soak(
    minutes: float = typer.Option(..., "--minutes", min=1.0, help="how long the traffic runs"),
    rate: float = typer.Option(DEFAULT_RATE, "--rate", min=1.0, help="open-loop requests per second"),
    interval: float = typer.Option(30.0, "--interval", min=1.0, help="seconds between samples"),
    ttl: int | None = typer.Option(None, "--ttl", min=240,
                                   help="seconds the run's stores keep a message's keys (REACH_TERMINAL_TTL, "
                                   "REACH_STATUS_RETENTION, the agent's result TTL); default: the product's "
                                   "(30 min, 7 days). The TTL-bound series are judged only when the last half "
                                   "starts past it"),
    json_file: Path | None = typer.Option(None, "--json", help="also write the report and every sample to FILE"),
    plot_file: Path | None = typer.Option(None, "--plot", help="also draw RSS and Redis memory over time to FILE "
                                          "(PNG, needs matplotlib)"),
    broker_shared: bool = typer.Option(False, "--broker-shared",
                                       help="other work uses the broker meanwhile (CI's tests): its RSS and open "
                                       "fds are shown, not judged"),
    workdir: Path | None = typer.Option(None, "--dir", help="where the run's logs, ledger and receipts go "
                                        "(default $REACH_HOME/soak/<start time>)"),
) -> None:
    settings = SoakSettings(minutes=minutes, rate=rate, interval_s=interval, ttl_s=ttl, broker_shared=broker_shared)
    home = ReachSettings().home
    infra = LocalInfra(home)
    if not infra.status().running:
        err_console.print(f"[bold red]error:[/] no local broker runs under {home}: start one with `reach local up`.")
        raise typer.Exit(Exit.UNREACHABLE)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    console.print(f"reach soak: {minutes:g} min at {rate:g} req/s, a sample every {interval:g} s, "
                  f"TTL {'the defaults' if ttl is None else f'{ttl} s'}", highlight=False)
    _stop_on_signals()
    began = time.time()
    where = workdir or home / "soak" / time.strftime("%Y%m%dT%H%M%S", time.gmtime(began))
    report = run(settings, infra=infra, workdir=where)
    if json_file is not None:
        json_file.write_text(json.dumps(report.as_dict(), indent=1))
    if plot_file is not None:
        from reach.tooling.soak.plot import plot

        plot(report, plot_file)
    show(report)
    if not report.ok:
        raise typer.Exit(Exit.NOT_COMPLETED)


soak.__doc__ = HELP


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP end the run as Ctrl-C does: the `finally` blocks stop the router, the agents and the private
    Redis. Python's default for SIGTERM exits at once, so a killed soak used to leave all of them running."""

    def interrupt(signum: int, _frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second signal must not cut the clean-up short
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupt)


def show(report: Report) -> None:
    table = Table("series", "samples (last half)", "level (last half)", "rise over the last half", "allowed", "verdict")
    for v in report.verdicts:
        verdict = "[red]grows[/]" if v.grows else "[green]levels off[/]" if v.judged else f"not judged: {v.why_not}"
        table.add_row(v.name, str(v.samples), _n(v.level), _n(v.rise), _n(v.allowed), verdict)
    console.print(table)
    f = report.figures
    if f is not None:
        console.print(f"sent {f.sent}, acknowledged {f.acked}, terminal {f.terminal}, lost {f.lost}, "
                      f"two different terminals {f.double_terminal}, repeated identical terminals {f.late_terminal}, "
                      f"p99 {f.p99_ms} ms; outcomes {f.outcomes}", highlight=False)
    console.print("churn: " + "; ".join(report.events), highlight=False)
    if report.crashes:
        console.print(f"[yellow]processes that exited on their own (restarted):[/] {report.crashes}")
    console.print(f"evidence: {report.workdir}", highlight=False)
    console.print("[green]passed[/]" if report.ok else "[red]failed:[/] " + "; ".join(report.misses))


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
