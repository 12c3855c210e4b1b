"""`reach faults run|list`: the fault suite on a real 3-broker cluster, with the checker's figures per scenario."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer
from rich.table import Table

from reach.cli.common import Exit, console, err_console
from reach.settings import ReachSettings
from reach.tooling.faults.report import TABLE_COLUMNS, cell, markdown, verdict_text
from reach.tooling.faults.runner import Result, run
from reach.tooling.faults.scenarios import SCENARIOS, select
from reach.tooling.faults.settings import FaultSettings
from reach.tooling.local import LocalInfra

app = typer.Typer(help="Fault suite: kill, pause and bounce the parts under open-loop traffic; count what "
                  "was lost or done twice.", no_args_is_help=True)


def _row(result: Result) -> list[str]:
    data = result.as_dict()
    style = "green" if result.ok else "red"
    return [result.scenario.name, *(cell(data[c]) for c in TABLE_COLUMNS), f"[{style}]{verdict_text(data)}[/]"]


@app.command("list")
def list_() -> None:
    """The scenarios, in the order `run` runs them."""
    table = Table("scenario", "kind", "what it does", "recovery target")
    for s in SCENARIOS:
        reason = s.unavailable()
        table.add_row(s.name, str(s.kind), s.summary + (f" [yellow](not here: {reason})[/]" if reason else ""),
                      f"{s.recovery_target_s:.0f} s")
    console.print(table)


@app.command("table")
def table_(results: Path = typer.Argument(..., help="the output of `reach faults run --json`")) -> None:
    """Print saved results as the Markdown table docs/reliability.md carries."""
    try:
        rows = [json.loads(line) for line in results.read_text().splitlines() if line.startswith("{")]
    except (OSError, ValueError) as exc:
        err_console.print(f"[bold red]error:[/] cannot read {results}: {exc}. Expected `reach faults run --json` "
                          "output, one JSON object a line.")
        raise typer.Exit(Exit.USAGE) from None
    print(markdown(rows), end="")


@app.command("run")
def run_(
    only: str | None = typer.Option(None, "--only", help="comma-separated scenario names (default: all)"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per scenario on stdout"),
    keep: bool = typer.Option(False, "--keep", help="leave the cluster running afterwards"),
    shared: bool = typer.Option(False, "--shared", help="run every scenario on one rig (router, agents) instead "
                                "of a fresh one each: faster, less isolated"),
) -> None:
    """Run the suite on the cluster under $REACH_HOME/faults (started with --brokers 3 when not running).

    Exits 1 when a scenario misses a target (lost, double terminal, repeated effects outside the agent,
    recovery)."""
    scenarios = select(only)
    settings = FaultSettings()
    home = ReachSettings().home / "faults"
    infra = LocalInfra(home)
    started = not infra.status().running
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(message)s")
    if started:
        err_console.print(f"starting a {settings.brokers}-broker cluster under {home} ...")
        infra.up(brokers=settings.brokers)
    table = Table("scenario", *TABLE_COLUMNS, "verdict")

    def show(result: Result) -> None:
        if as_json:
            print(json.dumps(result.as_dict()), flush=True)
        table.add_row(*_row(result))

    try:
        results = run(scenarios, infra=infra, settings=settings, workdir=home / "runs", shared=shared,
                      on_result=show)
    finally:
        if started and not keep:
            infra.down()
    if not as_json:
        console.print(table)
        console.print(f"rate {settings.rate:.0f} req/s; {infra.status().brokers} brokers; "
                      f"warm-up {settings.warmup_s:.0f} s, after {settings.after_s:.0f} s"
                      + "".join(f" ({r.scenario.name} {r.scenario.after_s(settings):.0f} s)" for r in results
                                if r.scenario.after_s(settings) != settings.after_s))
    if not all(r.ok for r in results):
        raise typer.Exit(Exit.NOT_COMPLETED)
