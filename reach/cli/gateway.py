"""`reach gateway`: the signed HTTP ingress (docs/http.md, The gateway)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from reach import traceexport
from reach.settings import ReachSettings


def gateway(
    host: str | None = typer.Option(None, "--host", help="address to bind (default REACH_GATEWAY_HOST, 127.0.0.1)"),
    port: int | None = typer.Option(None, "--port", min=1, max=65535,
                                    help="port to bind (default REACH_GATEWAY_PORT, 8080)"),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="serve HTTPS with this PEM certificate (chain) "
                                         "(default REACH_GATEWAY_TLS_CERT_FILE); needs --tls-key"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="the PEM private key of --tls-cert "
                                        "(default REACH_GATEWAY_TLS_KEY_FILE)"),
    grpc_port: int | None = typer.Option(None, "--grpc-port", min=1, max=65535,
                                         help="also serve gRPC (reach.v1.Gateway, with server reflection) on this "
                                         "port, same host and TLS (default REACH_GATEWAY_GRPC_PORT: off)"),
) -> None:
    """Serve POST /v1/envelopes, /v1/invoke and the status routes to signed apps (OpenAPI at /openapi.json); with
    --grpc-port, the same over gRPC (docs/grpc.md)."""
    from reach.channels.settings import ChannelSettings, ClosureSettings, ReportSettings
    from reach.cli.common import check_redis_login
    from reach.gateway.httpsettings import HttpSettings
    from reach.gateway.server import serve
    from reach.gateway.settings import GatewaySettings
    from reach.gateway.wiring import GatewayConfig, door_guards
    from reach.kafka import clients
    from reach.settings import KafkaSettings, RedisSettings

    listen = GatewaySettings()
    if tls_cert is not None or tls_key is not None:  # the options win over REACH_GATEWAY_TLS_*; checked again
        listen = GatewaySettings(tls_cert_file=tls_cert or listen.tls_cert_file,
                                 tls_key_file=tls_key or listen.tls_key_file)
    config = GatewayConfig(reach=ReachSettings(), kafka=KafkaSettings(), redis=RedisSettings(),
                           gateway=listen, http=HttpSettings(), closure=ClosureSettings(),
                           reports=ReportSettings(),
                           # A2A push URLs follow the webhook channel's rule, which sends them
                           push_allow_private=ChannelSettings().webhook_allow_private)
    clients.check_reachable(clients.admin(config.kafka))  # exit 4 in seconds, before the apps directory waits
    traceexport.configure("reach-gateway", os.environ)  # spans exported when OTEL_* asks for them
    check_redis_login(config.redis)
    serve(door_guards(config), host=host or listen.host, port=port or listen.port, config=config,
          grpc_port=grpc_port or listen.grpc_port)
