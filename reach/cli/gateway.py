"""`reach gateway`: the signed HTTP ingress (docs/http.md, The gateway)."""

from __future__ import annotations

import typer

from reach.settings import ReachSettings


def gateway(
    host: str | None = typer.Option(None, "--host", help="address to bind (default REACH_GATEWAY_HOST, 127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", min=1, max=65535,
                                    help="port to bind (default REACH_GATEWAY_PORT, 8080)"),
) -> None:
    """Serve POST /v1/envelopes, /v1/invoke and the status routes to signed apps (OpenAPI at /openapi.json)."""
    from reach.channels.settings import ClosureSettings, ReportSettings
    from reach.gateway.httpsettings import HttpSettings
    from reach.gateway.server import serve
    from reach.gateway.settings import GatewaySettings
    from reach.gateway.wiring import GatewayConfig, door_guards
    from reach.kafka import clients
    from reach.settings import KafkaSettings, RedisSettings

    config = GatewayConfig(reach=ReachSettings(), kafka=KafkaSettings(), redis=RedisSettings(),
                           gateway=GatewaySettings(), http=HttpSettings(), closure=ClosureSettings(),
                           reports=ReportSettings())
    clients.check_reachable(clients.admin(config.kafka))  # exit 4 in seconds, before the apps directory waits
    listen = config.gateway
    serve(door_guards(config), host=host or listen.host, port=port or listen.port, config=config)
