"""`reach <noun> <verb>`: the operator and agent-author command line (rpk / kcat style)."""

from __future__ import annotations

import sys

import typer

from reach.cli import demo, local, topics
from reach.cli.common import run_guarded

app = typer.Typer(
    name="reach", help="Agent-Reach: the reach layer for multi-agent systems on Apache Kafka.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)
app.add_typer(local.app, name="local")
app.add_typer(topics.app, name="topics")
app.command("demo")(demo.demo)


def main() -> None:
    """Console entry point: user errors print a message and an exit code, never a traceback."""
    sys.exit(run_guarded(app))
