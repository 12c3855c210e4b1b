"""`reach gateway`: the signed HTTP ingress (docs/http.md, Gateway)."""

from __future__ import annotations

import typer

from reach.settings import ReachSettings


def gateway(
    host: str = typer.Option("127.0.0.1", "--host", envvar="REACH_GATEWAY_HOST", help="address to bind"),
    port: int = typer.Option(8080, "--port", envvar="REACH_GATEWAY_PORT", min=1, max=65535, help="port to bind"),
) -> None:
    """Serve POST /v1/envelopes, /v1/invoke and the status routes to signed apps (OpenAPI at /openapi.json)."""
    from reach.gateway.server import serve
    from reach.gateway.wiring import door_guards

    serve(door_guards(ReachSettings()), host=host, port=port)
