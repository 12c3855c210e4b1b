"""`reach <noun> <verb>`: the operator and agent-author command line (rpk / kcat style)."""

from __future__ import annotations

import sys

import typer

from reach.cli import a2a as a2a_cli
from reach.cli import agent, demo, local, send, topics
from reach.cli import apps as apps_cli
from reach.cli import audit as audit_cli
from reach.cli import canary as canary_cli
from reach.cli import channels as channels_cli
from reach.cli import dlq as dlq_cli
from reach.cli import handoff as handoff_cli
from reach.cli import instances as instances_cli
from reach.cli import intents as intents_cli
from reach.cli import mcp as mcp_cli
from reach.cli import operators as operators_cli
from reach.cli import policy as policy_cli
from reach.cli import receipts as receipts_cli
from reach.cli import router as router_cli
from reach.cli import status as status_cli
from reach.cli import weights as weights_cli
from reach.cli.answer import answer as answer_command
from reach.cli.cancel import cancel as cancel_command
from reach.cli.common import run_guarded
from reach.cli.gateway import gateway as gateway_command
from reach.kafka import codec, writeas
from reach.settings import ReachSettings

app = typer.Typer(
    name="reach", help="Agent-Reach: the reach layer for multi-agent systems on Apache Kafka.",
    no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
)


@app.callback()
def _entry() -> None:
    # the CLI is an entry point (docs/architecture.md): the settings below it come from here, the codec's too
    settings = ReachSettings()
    codec.use_schema_registry(settings.schema_registry_url)
    writeas.use(settings.records_write_as)


app.add_typer(local.app, name="local")
app.add_typer(topics.app, name="topics")
app.add_typer(agent.app, name="agent")
app.add_typer(instances_cli.app, name="agents")
app.command("send")(send.send)
app.command("cancel")(cancel_command)
app.command("answer")(answer_command)
app.command("demo")(demo.demo)
app.command("router")(router_cli.router)
app.command("gateway")(gateway_command)
app.command("bench")(__import__("reach.cli.bench", fromlist=["bench"]).bench)
app.add_typer(weights_cli.app, name="weights")
app.add_typer(policy_cli.app, name="policy")
app.add_typer(receipts_cli.app, name="receipts")
app.add_typer(audit_cli.app, name="audit")

app.command("status")(status_cli.status)
app.command("trace")(status_cli.trace)
app.add_typer(dlq_cli.app, name="dlq")
app.add_typer(canary_cli.app, name="canary")
app.add_typer(apps_cli.app, name="apps")
app.add_typer(channels_cli.app, name="channels")
app.add_typer(operators_cli.app, name="operators")
app.add_typer(a2a_cli.app, name="a2a")
app.add_typer(mcp_cli.app, name="mcp")
app.add_typer(intents_cli.app, name="intents")
app.add_typer(handoff_cli.app, name="handoff")
app.add_typer(__import__("reach.cli.faults", fromlist=["app"]).app, name="faults")
app.command("soak")(__import__("reach.cli.soak", fromlist=["soak"]).soak)


def main() -> None:
    """Console entry point: user errors print a message and an exit code, never a traceback."""
    sys.exit(run_guarded(app))
