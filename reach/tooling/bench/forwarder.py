"""A forwarding mode whose forwarder is a child process (plain faust, Quix Streams): burst, wait, read back."""

from __future__ import annotations

from collections.abc import Callable

from reach.tooling.bench.progress import analyse_forwards, result, wait_outputs
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace, envelopes, message_id


def run(ws: Workspace, mode: str, start: Callable[[str, str], Child], *, messages: int, warmup: int,
        timeout: float, notes: str) -> ModeResult:
    """Burst `warmup + messages` envelopes onto `<ns>.bench.<mode>.in`, let `start(source, sink)` forward them."""
    source = ws.ensure(ws.names.topic(f"bench.{mode}.in"))
    sink = ws.ensure_sink(ws.names.topic(f"bench.{mode}.out"))
    created: dict[str, int] = {}
    ws.burst(envelopes(ws, mode, source, f"bench.{mode}", warmup + messages, created))
    child = start(source, sink)
    try:
        progress = wait_outputs(ws, [sink], warmup=warmup, total=warmup + messages, cpu=child.cpu,
                                timeout=timeout, alive=child.alive)
        if not progress.done and not child.alive():
            raise RuntimeError(f"the {mode} forwarder exited:\n{child.tail()}")
    finally:
        child.stop()
    measured = {message_id(mode, s) for s in range(warmup, warmup + messages)}
    outputs = ((r.key.decode(), r.timestamp) for r in ws.read([sink]) if r.key)
    forwards = analyse_forwards(mode, outputs, created, measured, basis="created_at -> sink append (burst)")
    return result(mode, progress, forwards, messages, notes=notes)
