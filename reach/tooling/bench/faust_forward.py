"""Mode `faust`: a plain faust agent forwarding topic A -> B, as a user of the same stack would write it.

`python -m reach.tooling.bench.faust_forward APP_ID SOURCE SINK` runs the worker (the bench starts it as a
child process, so its CPU is read from /proc and its event loop owns its main thread).
"""

from __future__ import annotations

import sys
from typing import Any

from reach.settings import KafkaSettings
from reach.streams.credentials import faust_broker_options
from reach.tooling.bench import forwarder
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace


def build_app(app_id: str, source: str, sink: str, kafka: KafkaSettings) -> Any:
    """faust's defaults except a memory store; one agent, one awaited send per event."""
    import faust

    app = faust.App(app_id, **faust_broker_options(kafka), store="memory://", autodiscover=False,
                    web_enabled=False, topic_replication_factor=1)
    inbound = app.topic(source, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")
    outbound = app.topic(sink, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")

    @app.agent(inbound)
    async def forward(stream: Any) -> None:
        async for event in stream.events():
            await outbound.send(key=event.key, value=event.value)

    return app


def run(ws: Workspace, *, messages: int, warmup: int, timeout: float = 180.0) -> ModeResult:
    def start(source: str, sink: str) -> Child:
        return Child("faust", ["reach.tooling.bench.faust_forward", f"{ws.namespace}.faust", source, sink],
                     env={"REACH_BOOTSTRAP": ws.kafka.servers()})

    return forwarder.run(ws, "faust", start, messages=messages, warmup=warmup, timeout=timeout,
                         notes="faust worker in a child process (its CPU only)")


def main(argv: list[str]) -> None:
    import faust

    app_id, source, sink = argv
    app = build_app(app_id, source, sink, KafkaSettings())
    faust.Worker(app, loglevel="WARNING").execute_from_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
