"""`reach channels list|run|webhook-secret`: the channel catalog, one channel agent instance per provider
configuration, and a tenant's webhook secret."""

from __future__ import annotations

import json
import logging
import os
import sys

import typer
from rich.table import Table

from reach import traceexport
from reach.channels.catalog import BY_NAME, CHANNELS
from reach.cli.common import console
from reach.errors import ConfigError

app = typer.Typer(help="Channels: webhook, email and SMS delivery as capabilities; with no command, their health.")


@app.callback(invoke_without_command=True)
def health(ctx: typer.Context, as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Each running channel instance's health (HEALTHY / DEGRADED / OPEN) and its signals over the last minute."""
    if ctx.invoked_subcommand is not None:
        return
    from reach.channels.board import rows
    from reach.channels.boardread import read_board
    from reach.settings import ReachSettings, RedisSettings

    found = rows(read_board(RedisSettings(), ReachSettings().namespace))
    if as_json:
        print(json.dumps(found))
        return
    if not found:
        console.print("No channel instance has reported its health in the last 20 s "
                      "(start one with `reach channels run --channel <name>`).")
        return
    table = Table("channel", "instance", "state", "success", "p95", "reports", "reason")
    for row in found:
        table.add_row(row["channel"], row["instance_id"], row["state"], _pct(row["success"]),
                      "-" if row["p95_ms"] is None else f"{row['p95_ms']:.0f} ms", _pct(row["arrival"]),
                      row["reason"] or "")
    console.print(table)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """The channels this build can serve, with their capability and agent id."""
    rows = [{"channel": c.name, "capability": c.capability, "agent_id": c.agent_id, "provider": c.summary}
            for c in CHANNELS]
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table("channel", "capability", "agent", "provider")
    for row in rows:
        table.add_row(row["channel"], row["capability"], row["agent_id"], row["provider"])
    console.print(table)


@app.command()
def run(channel: str = typer.Option(..., "--channel", help=f"one of {', '.join(BY_NAME)}"),
        log_level: str = typer.Option("INFO", "--log-level", help="Python logging level")) -> None:
    """Run one channel agent instance (its provider from REACH_CHANNEL_*) until SIGTERM/SIGINT."""
    from reach.channels.agent import channel_agent
    from reach.channels.settings import ChannelSettings, ClosureSettings
    from reach.settings import KafkaSettings, ReachSettings, RedisSettings

    if channel not in BY_NAME:
        raise ConfigError(f"Unknown channel {channel!r}; expected one of {', '.join(BY_NAME)}.")
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    agent = channel_agent(channel, settings=ChannelSettings(), kafka=KafkaSettings(), redis=RedisSettings(),
                          reach=ReachSettings(), closure=ClosureSettings())
    logging.getLogger("reach.channels").info("starting %s as instance %s", agent.agent_id, agent.instance_id)
    traceexport.configure("reach-channel", os.environ)  # when OTEL_* asks (before Agent.run's own)
    agent.run()


@app.command("webhook-secret")
def webhook_secret(tenant: str = typer.Argument(..., help="the tenant whose receivers verify the webhooks"),
                   previous: bool = typer.Option(False, "--previous",
                                                 help="from REACH_CHANNEL_WEBHOOK_PREVIOUS_SECRET")) -> None:
    """Print the webhook secret of one tenant's receivers (derived from REACH_CHANNEL_WEBHOOK_SECRET): give it to
    that tenant only; its receivers verify `Reach-Signature` with it (docs/channels.md)."""
    from reach.channels.settings import ChannelSettings
    from reach.channels.webhooksig import tenant_secret

    settings = ChannelSettings()
    chosen = settings.webhook_previous_secret if previous else settings.webhook_secret
    name = "REACH_CHANNEL_WEBHOOK_PREVIOUS_SECRET" if previous else "REACH_CHANNEL_WEBHOOK_SECRET"
    if chosen is None or not chosen.get_secret_value():
        raise ConfigError(f"{name} is not set; set it as on the webhook channel agents and run this again.")
    console.print(tenant_secret(chosen.get_secret_value().encode(), tenant).decode(), highlight=False)
