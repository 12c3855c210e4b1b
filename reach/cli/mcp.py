"""`reach mcp`: where the gateway serves MCP (/mcp), and `reach mcp stdio`, the local assistants' relay to it
(docs/mcp.md)."""

from __future__ import annotations

import json
import logging
import os
import sys

import typer

from reach.cli.common import console
from reach.errors import ConfigError

TOKEN_ENV = "REACH_MCP_TOKEN"  # the app key, `<key_id>.rat_<hex>`: never a command-line argument (ps shows those)
URL_ENV = "REACH_MCP_URL"

app = typer.Typer(help="MCP: the live capabilities as Model Context Protocol tools (docs/mcp.md).")


def _default_url() -> str:
    """REACH_MCP_URL, else the gateway's public URL, else where `reach gateway` listens by default."""
    from reach.gateway.httpsettings import HttpSettings
    from reach.gateway.settings import GatewaySettings

    given = os.environ.get(URL_ENV)
    if given:
        return given
    public = HttpSettings().public_url
    if public:
        return public.rstrip("/") + "/mcp"
    listen = GatewaySettings()
    return f"http://{listen.host}:{listen.port}/mcp"


@app.callback(invoke_without_command=True)
def where(ctx: typer.Context, url: str | None = typer.Option(None, "--url", help="the gateway's /mcp URL"),
          as_json: bool = typer.Option(False, "--json", help="print the assistant configuration as JSON")) -> None:
    """Print the gateway's MCP endpoint and an assistant configuration for it. The gateway (`reach gateway`)
    serves MCP; there is no second server to run: every tool call goes through its door."""
    if ctx.invoked_subcommand is not None:
        return
    endpoint = url or _default_url()
    stdio = {"mcpServers": {"agent-reach": {"command": "reach", "args": ["mcp", "stdio", "--url", endpoint],
                                            "env": {TOKEN_ENV: "<key_id>.rat_<hex>"}}}}
    if as_json:
        print(json.dumps({"url": endpoint, "http": {"url": endpoint, "headers": {
            "Authorization": "Bearer <key_id>.rat_<hex>"}}, "stdio": stdio}))
        return
    console.print(f"MCP (streamable HTTP) is served by the gateway at [bold]{endpoint}[/]", highlight=False)
    console.print("Authenticate with a gateway app key (`reach apps create`): "
                  "Authorization: Bearer <key_id>.rat_<hex>", highlight=False)
    console.print("For a local assistant that starts MCP servers as commands (stdio):", highlight=False)
    print(json.dumps(stdio, indent=2))


@app.command()
def stdio(url: str | None = typer.Option(None, "--url", help=f"the gateway's /mcp URL (default {URL_ENV}, else "
                                                                   "the local gateway)"),
          log_level: str = typer.Option("WARNING", "--log-level")) -> None:
    """Serve MCP over stdin/stdout, relayed to the gateway's /mcp with the app key in REACH_MCP_TOKEN."""
    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token or "." not in token:
        raise ConfigError(f"{TOKEN_ENV} must hold a gateway app key as <key_id>.rat_<hex> (`reach apps create` "
                          "prints both); it is read from the environment so that no process listing shows it")
    import anyio

    from reach.mcp.relay import serve_stdio  # the SDK loads only for this command

    # stdout is the protocol's wire: every log line goes to stderr
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    anyio.run(serve_stdio, url or _default_url(), token)


BRIDGE_AUTH_ENV = "REACH_MCP_BRIDGE_AUTHORIZATION"  # the Authorization header for --url (never an argument)


@app.command()
def bridge(command: str | None = typer.Option(None, "--command", help="the MCP server's command line (stdio), "
                                                                      "e.g. \"python server.py\""),
           url: str | None = typer.Option(None, "--url", help="the MCP server's streamable HTTP URL"),
           prefix: str = typer.Option("mcp", "--prefix", help="capability names are <prefix>.<tool>"),
           agent_id: str | None = typer.Option(None, "--agent-id", help="default agent://mcp/<prefix>"),
           version: str = typer.Option("1.0.0", "--version", help="the capabilities' semver"),
           max_concurrency: int = typer.Option(8, "--max-concurrency", min=1),
           region: str | None = typer.Option(None, "--region"),
           call_timeout: float = typer.Option(300.0, "--call-timeout", min=0.1, help="seconds a tool call may take"),
           env: list[str] = typer.Option([], "--env", help="with --command: pass this variable of the bridge's "
                                                          "environment to the server (repeatable; the MCP SDK passes "
                                                          "only HOME, PATH and a few others by default)"),
           log_level: str = typer.Option("INFO", "--log-level")) -> None:
    """Run an MCP server's tools as capabilities of one agent instance (docs/mcp.md#bridge): each tool is
    `<prefix>.<tool>` with the tool's input schema as its contract. --url sends the Authorization header in
    REACH_MCP_BRIDGE_AUTHORIZATION, if set."""
    from reach.mcp import bridge as mcp_bridge

    if (command is None) == (url is None):
        raise typer.BadParameter("give exactly one of --command (stdio) or --url (streamable HTTP)")
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    missing = [name for name in env if name not in os.environ]
    if missing:
        raise typer.BadParameter(f"--env names variables this environment does not have: {', '.join(missing)}")
    passed = {name: os.environ[name] for name in env}
    transport = (mcp_bridge.stdio_transport(command, passed) if command is not None else
                 mcp_bridge.http_transport(url or "", os.environ.get(BRIDGE_AUTH_ENV) or None))
    mcp_bridge.run_bridge(transport, agent_id=agent_id or f"agent://mcp/{prefix.replace('.', '-')}", prefix=prefix,
                          version=version, call_timeout_s=call_timeout, max_concurrency=max_concurrency,
                          region=region)
