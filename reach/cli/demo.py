"""`reach demo`: the main job on the embedded default, with a readable summary."""

from __future__ import annotations

import typer

from reach.demo import run_demo

app = typer.Typer()


@app.command()
def demo(duration: float = typer.Option(None, "--duration", help="Seconds to run; default until Ctrl-C.")) -> None:
    """Start the local broker and Redis (unless REACH_BOOTSTRAP is set), apply topics, and show traffic."""
    run_demo(duration)
