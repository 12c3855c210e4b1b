"""Mode `tracing`: the no-op round trip at one offered rate with tracing off, then on, then off and on again, in
one run (decision 0066). "On" is the standard OTEL_* variables given to the router and the agent: every span
exported over OTLP/HTTP to a real receiver on loopback (reach.tooling.otlpsink), sampler
`parentbased_always_on`; "off" is the same processes without them (no SDK installed, so Reach's span calls
check one flag). The figure is CPU per 1k requests of the router and agent processes, and the latency."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from reach.tooling.bench import round_trip
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.workspace import Workspace
from reach.tooling.otlpsink import OtlpReceiver

ORDER = ("off", "on", "off", "on")  # alternated: a drift of the shared machine's load falls on both sides


@contextmanager
def environment(changes: dict[str, str]) -> Iterator[None]:
    """os.environ with `changes` while the children start (they inherit it), restored after."""
    before = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run(make_workspace: Callable[[], Workspace], *, rate: float, seconds: float) -> list[ModeResult]:
    """One round trip per entry of ORDER, each in a namespace of its own with fresh processes."""
    results: list[ModeResult] = []
    with OtlpReceiver(keep=False) as sink:
        for i, state in enumerate(ORDER):
            changes = ({"OTEL_SDK_DISABLED": "false", "OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
                        "OTEL_TRACES_SAMPLER": "parentbased_always_on"} if state == "on"
                       else {"OTEL_SDK_DISABLED": "true"})  # off even where the shell exports OTEL_* for itself
            received = sink.received
            ws = make_workspace()
            try:
                with environment(changes):
                    [result] = round_trip.run(ws, rates=[rate], seconds=seconds)
            finally:
                ws.delete()
            result.mode = f"tracing {state} {int(rate)}/s (run {i + 1})"
            result.figures["spans_exported"] = sink.received - received
            results.append(result)
    return results
