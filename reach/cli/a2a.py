"""`reach a2a bridge --url URL --capability x.y`: serve a capability with an external A2A agent."""

from __future__ import annotations

import logging
import sys

import typer

app = typer.Typer(help="A2A: bridge external A2A agents onto the bus (docs/a2a.md).", no_args_is_help=True)


@app.command()
def bridge(
    url: str = typer.Option(..., "--url", help="The remote A2A server (its card at URL/.well-known/agent-card.json)"),
    capability: str = typer.Option(..., "--capability", help="The capability it serves, e.g. text.summarize"),
    version: str = typer.Option("1.0.0", "--version", help="The capability version to register"),
    agent_id: str | None = typer.Option(None, "--agent-id", help="Default agent://a2a/<capability with dashes>"),
    region: str | None = typer.Option(None, "--region"),
    max_concurrency: int = typer.Option(8, "--max-concurrency", min=1),
    log_level: str = typer.Option("INFO", "--log-level"),
) -> None:
    """Run one bridge instance until SIGTERM/SIGINT: its inbox's messages go to the remote agent, its tasks'
    outcomes come back as receipts (REACH_A2A_BEARER authenticates to it)."""
    from reach.a2a.bridge import BridgeSettings, bridge_agent  # the SDK client loads only for this command

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    agent = bridge_agent(url=url, capability=capability, version=version, agent_id=agent_id, region=region,
                         max_concurrency=max_concurrency, settings=BridgeSettings())
    logging.getLogger("reach.a2a").info("bridging %s as %s (%s) to %s", capability, agent.agent_id,
                                        agent.instance_id, url)
    agent.run()
