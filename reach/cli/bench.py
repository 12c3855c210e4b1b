"""`reach bench`: raw Kafka, plain faust, the router, the round trip and scoring side by side in one run."""

from __future__ import annotations

from pathlib import Path

import typer

from reach.cli.common import Exit, console, err_console


def bench(
    json_file: Path | None = typer.Option(None, "--json", help="also write the results as JSON to FILE"),
    messages: int = typer.Option(20_000, "--messages", help="measured messages per throughput mode (after warm-up)"),
    rates: str = typer.Option("500,2000,5000", "--rates", help="round trip offered rates, envelopes/s"),
    seconds: float = typer.Option(5.0, "--seconds", help="measured seconds per round-trip rate"),
    modes: str = typer.Option(",".join(("raw", "faust", "route", "roundtrip", "scoring")), "--modes",
                              help="which modes to run"),
    batch_size: int = typer.Option(500, "--batch-size", help="the router's consume batch"),
    quick: bool = typer.Option(False, "--quick", help="tiny counts: checks the bench works, measures nothing"),
) -> None:
    """Measure every mode in one run against the local broker (or REACH_BOOTSTRAP); print one table."""
    from reach.bench.report import render
    from reach.bench.suite import MODES, BenchConfig, run
    from reach.settings import ReachSettings

    try:
        offered = tuple(float(r) for r in rates.split(",") if r.strip())
    except ValueError:
        err_console.print(f"[bold red]error:[/] --rates takes numbers separated by commas (500,2000); got {rates!r}")
        raise typer.Exit(Exit.USAGE) from None
    chosen = tuple(m.strip() for m in modes.split(",") if m.strip())
    unknown = [m for m in chosen if m not in MODES]
    if unknown or not offered or messages < 1:
        err_console.print(f"[bold red]error:[/] unknown mode(s) {unknown} (known: {', '.join(MODES)}), "
                          "or no rates, or --messages < 1")
        raise typer.Exit(Exit.USAGE)
    topics_file = ReachSettings().topics_file
    if quick:
        config = BenchConfig.quick(modes=chosen, topics_file=topics_file, batch_size=batch_size)
    else:
        config = BenchConfig(messages=messages, warmup=max(messages // 10, 100), rates=offered, rate_seconds=seconds,
                             modes=chosen, topics_file=topics_file, batch_size=batch_size)
    report = run(config, progress=lambda msg: err_console.print(f"[dim]bench: {msg}[/]"))
    render(report, console)
    if json_file is not None:
        report.write_json(json_file)
        err_console.print(f"[dim]wrote {json_file}[/]")
    if any(r.lost for r in report.results):
        raise typer.Exit(Exit.NOT_COMPLETED)
