"""Run the gateway under uvicorn with limits that keep one slow or hostile client from costing the others."""

from __future__ import annotations

import logging

import uvicorn
from fastapi import FastAPI

from reach.gateway.httpsettings import HttpSettings
from reach.gateway.service import build_gateway
from reach.gateway.wiring import Guards, build_dependencies


def uvicorn_config(app: FastAPI, *, host: str, port: int, http: HttpSettings) -> uvicorn.Config:
    """h11 caps the request head (huge headers: 431/400 before any route runs); idle keep-alive connections
    close after `keep_alive`; bodies are read by the routes in chunks against their own limit (413)."""
    return uvicorn.Config(
        app, host=host, port=port, http="h11", loop="asyncio", lifespan="on", access_log=False,
        timeout_keep_alive=int(max(1, http.keep_alive)), h11_max_incomplete_event_size=http.max_header_bytes,
        backlog=2048, timeout_graceful_shutdown=10, server_header=False, log_level="info",
    )


def serve(guards: Guards, *, host: str, port: int, http: HttpSettings | None = None) -> None:
    """Block serving until SIGINT/SIGTERM; the dependencies close with the app."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    http = http or HttpSettings()
    deps = build_dependencies(guards, port=port, http=http)
    app = build_gateway(deps, http)
    uvicorn.Server(uvicorn_config(app, host=host, port=port, http=http)).run()
