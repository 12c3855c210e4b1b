"""Mode `faust`: a plain faust agent forwarding topic A -> B, as a user of the same stack would write it.

`python -m reach.bench.faust_forward APP_ID SOURCE SINK` runs the worker (the bench starts it as a
child process, so its CPU is read from /proc and its event loop owns its main thread).
"""

from __future__ import annotations

import sys
from typing import Any

from reach.bench.progress import analyse_forwards, result, wait_outputs
from reach.bench.results import ModeResult
from reach.bench.subprocesses import Child
from reach.bench.workspace import Workspace, envelopes, message_id


def build_app(app_id: str, source: str, sink: str, bootstrap: str) -> Any:
    """faust's defaults except a memory store; one agent, one awaited send per event."""
    import faust

    app = faust.App(app_id, broker=f"kafka://{bootstrap}", store="memory://", autodiscover=False,
                    web_enabled=False, topic_replication_factor=1)
    inbound = app.topic(source, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")
    outbound = app.topic(sink, key_type=bytes, value_type=bytes, value_serializer="raw", key_serializer="raw")

    @app.agent(inbound)
    async def forward(stream: Any) -> None:
        async for event in stream.events():
            await outbound.send(key=event.key, value=event.value)

    return app


def run(ws: Workspace, *, messages: int, warmup: int, timeout: float = 180.0) -> ModeResult:
    source = ws.ensure(ws.names.topic("bench.faust.in"))
    sink = ws.ensure(ws.names.topic("bench.faust.out"))
    created: dict[str, int] = {}
    ws.burst(envelopes(ws, "faust", source, "bench.faust", warmup + messages, created))
    child = Child("faust", ["reach.bench.faust_forward", f"{ws.namespace}.faust", source, sink],
                  env={"REACH_BOOTSTRAP": ws.kafka.servers()})
    try:
        progress = wait_outputs(ws, [sink], warmup=warmup, total=warmup + messages, cpu=child.cpu,
                                timeout=timeout, alive=child.alive)
        if not progress.done and not child.alive():
            raise RuntimeError(f"the faust forwarder exited:\n{child.tail()}")
    finally:
        child.stop()
    measured = {message_id("faust", s) for s in range(warmup, warmup + messages)}
    outputs = ((r.key.decode(), r.timestamp) for r in ws.read([sink]) if r.key)
    forwards = analyse_forwards("faust", outputs, created, measured, basis="created_at -> sink append (burst)")
    return result("faust", progress, forwards, messages, notes="faust worker in a child process (its CPU only)")


def main(argv: list[str]) -> None:
    import faust

    app_id, source, sink = argv
    from reach.settings import KafkaSettings

    app = build_app(app_id, source, sink, KafkaSettings().servers())
    faust.Worker(app, loglevel="WARNING").execute_from_commandline()


if __name__ == "__main__":
    main(sys.argv[1:])
