"""`reach <noun> <verb>`: the operator and agent-author command line (rpk / kcat style).

Each command lives in its own module, imported only when that command runs (`reach router` does not import the
bench, DuckDB or the demo): every process the platform starts is a `reach ...` command, and importing every
module took ~1.6 s of CPU per start. `reach`, `reach --help` and an unknown command build the whole app."""

from __future__ import annotations

import importlib
import sys

import typer

from reach.cli.common import run_guarded
from reach.kafka import codec, writeas
from reach.settings import ReachSettings

COMMANDS: dict[str, tuple[str, str, bool]] = {
    # name: (module, attribute, a group of verbs?), in the order `reach --help` lists them
    "local": ("reach.cli.local", "app", True),
    "topics": ("reach.cli.topics", "app", True),
    "agent": ("reach.cli.agent", "app", True),
    "agents": ("reach.cli.instances", "app", True),
    "send": ("reach.cli.send", "send", False),
    "cancel": ("reach.cli.cancel", "cancel", False),
    "answer": ("reach.cli.answer", "answer", False),
    "demo": ("reach.cli.demo", "demo", False),
    "router": ("reach.cli.router", "router", False),
    "gateway": ("reach.cli.gateway", "gateway", False),
    "bench": ("reach.cli.bench", "bench", False),
    "weights": ("reach.cli.weights", "app", True),
    "policy": ("reach.cli.policy", "app", True),
    "receipts": ("reach.cli.receipts", "app", True),
    "audit": ("reach.cli.audit", "app", True),
    "status": ("reach.cli.status", "status", False),
    "trace": ("reach.cli.status", "trace", False),
    "dlq": ("reach.cli.dlq", "app", True),
    "canary": ("reach.cli.canary", "app", True),
    "apps": ("reach.cli.apps", "app", True),
    "channels": ("reach.cli.channels", "app", True),
    "operators": ("reach.cli.operators", "app", True),
    "a2a": ("reach.cli.a2a", "app", True),
    "mcp": ("reach.cli.mcp", "app", True),
    "intents": ("reach.cli.intents", "app", True),
    "handoff": ("reach.cli.handoff", "app", True),
    "faults": ("reach.cli.faults", "app", True),
    "soak": ("reach.cli.soak", "soak", False),
}


def _entry() -> None:
    # the CLI is an entry point (docs/architecture.md): the settings below it come from here, the codec's too
    settings = ReachSettings()
    codec.use_schema_registry(settings.schema_registry_url)
    writeas.use(settings.records_write_as)


def build(only: str | None = None) -> typer.Typer:
    """The `reach` app with every command, or with `only` that one (the others' modules are not imported)."""
    built = typer.Typer(
        name="reach", help="Agent-Reach: the reach layer for multi-agent systems on Apache Kafka.",
        no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    )
    built.callback()(_entry)
    for name, (module, attribute, group) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(module), attribute)
        if group:
            built.add_typer(target, name=name)
        else:
            built.command(name)(target)
    return built


def __getattr__(name: str) -> typer.Typer:
    """`reach.cli.app`: the whole app (tests and typer's CliRunner), built on first use."""
    if name == "app":
        whole = build()
        globals()["app"] = whole
        return whole
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point: user errors print a message and an exit code, never a traceback."""
    args = sys.argv[1:]
    named = args[0] if args and args[0] in COMMANDS else None
    sys.exit(run_guarded(build(named)))
