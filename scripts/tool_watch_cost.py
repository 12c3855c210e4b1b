"""The MCP tool watch's pass over many sessions (reach.mcp.server.ToolWatch.check): wall time per pass.

Run from the repository root: `python scripts/tool_watch_cost.py [--sessions 1000] [--capabilities 200] [--passes 20]`.
Every session belongs to one app (the issue's case: one key opens every session); the host filters the live
capabilities by the app's list, as reach.gateway.routes_mcp.AdmissionHost does. Prints the median and the worst pass.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from reach.callers import CallerApp
from reach.mcp import server, tools
from reach.records import Capability


@dataclass
class Outbound:
    async def notify(self, method: str, params: Any) -> None:
        return None


@dataclass
class Connection:
    session_id: str
    outbound: Outbound = field(default_factory=Outbound)
    exit_stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


@dataclass
class Session:
    _connection: Connection


@dataclass
class Context:
    session: Session


class Host:
    def __init__(self, live: Sequence[Capability]) -> None:
        self.live = list(live)

    def capabilities(self, app: CallerApp) -> Sequence[Capability]:
        return [cap for cap in self.live if app.may_call(cap.name)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--capabilities", type=int, default=200)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()
    schema = '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}'
    live = [Capability(name=f"demo.c{i}", version="1.0.0", input_schema=schema) for i in range(args.capabilities)]
    host = Host(live)
    app = CallerApp(app_id="a1", name="a1", tenant="acme", capabilities=(), rate=10, burst=10)
    watch = server.ToolWatch(host)  # type: ignore[arg-type]
    seen = tools.fingerprint(host.capabilities(app))
    for i in range(args.sessions):
        watch.watch(Context(Session(Connection(session_id=f"s{i}"))), app, seen)  # type: ignore[arg-type]
    times = []
    for _ in range(args.passes):
        started = time.perf_counter()
        asyncio.run(watch.check())
        times.append(time.perf_counter() - started)
    print(f"sessions={args.sessions} capabilities={args.capabilities} passes={args.passes} "
          f"median={statistics.median(times) * 1000:.2f} ms worst={max(times) * 1000:.2f} ms")


if __name__ == "__main__":
    main()
