"""Run the gateway under uvicorn with limits that keep one slow or hostile client from costing the others."""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from reach.gateway.httpproto import head_limited
from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import Beside, build_gateway
from reach.gateway.wiring import GatewayConfig, Guards, build_dependencies


def uvicorn_config(app: FastAPI, *, host: str, port: int, http: HttpSettings,
                   tls: tuple[Path, Path] | None = None) -> uvicorn.Config:
    """httptools on uvloop (docs/decisions/0014-gateway-throughput.md) with a cap on the request head (huge
    headers: 431 before any route runs); idle keep-alive connections close after `keep_alive`; bodies are
    read by the routes in chunks against their own limit (413). `tls` (certificate, key: PEM files) serves HTTPS."""
    return uvicorn.Config(
        app, host=host, port=port, http=head_limited(http.max_header_bytes), loop="uvloop", lifespan="on",
        access_log=False, timeout_keep_alive=int(max(1, http.keep_alive)), proxy_headers=False,
        backlog=2048, timeout_graceful_shutdown=10, server_header=False, log_level="info",
        ssl_certfile=None if tls is None else str(tls[0]), ssl_keyfile=None if tls is None else str(tls[1]),
    )


def serve(guards: Guards, *, host: str, port: int, config: GatewayConfig, grpc_port: int | None = None) -> None:
    """Block serving until SIGINT/SIGTERM; the dependencies close with the app. `grpc_port`: gRPC ingress too, on
    the same host, with the same TLS (reach.grpc.ingress)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    http = config.http
    listen = config.gateway
    tls = (listen.tls_cert_file, listen.tls_key_file) if listen.tls_cert_file and listen.tls_key_file else None
    beside: list[Beside] = []
    if grpc_port is not None:
        from reach.grpc.ingress import serving  # only a gateway that serves gRPC loads grpcio

        pem = (tls[0].read_bytes(), tls[1].read_bytes()) if tls is not None else None
        beside.append(lambda admission: serving(admission, host=host, port=grpc_port, tls=pem))
    deps = build_dependencies(guards, port=port, config=config)
    app = build_gateway(deps, http, closure=config.closure, reports=config.reports, beside=beside)
    uvicorn.Server(uvicorn_config(app, host=host, port=port, http=http, tls=tls)).run()
