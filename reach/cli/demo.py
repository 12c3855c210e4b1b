"""`reach demo`: the whole system on one machine (broker, router, agents, traffic), live view and summary."""

from __future__ import annotations

import typer

from reach.tooling.demo import run_demo

app = typer.Typer()


@app.command()
def demo(
    duration: float = typer.Option(None, "--duration", min=1, help="Seconds of traffic; default until Ctrl-C."),
    rate: float = typer.Option(25.0, "--rate", min=1, max=500, help="Requests per second of the traffic mix."),
) -> None:
    """Start the local broker and Redis (unless REACH_BOOTSTRAP is set), the router and example agents in two
    regions; send a mix of traffic with a live view; stop everything it started and print a summary."""
    run_demo(duration, rate=rate)
