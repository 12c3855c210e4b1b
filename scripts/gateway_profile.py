"""Profiles one `reach gateway` process under the bench's signed load: where its event-loop thread's CPU goes.

Run from the repository root with REACH_BOOTSTRAP, REACH_REDIS_URL and an absolute REACH_HOME set:
`.venv/bin/python scripts/gateway_profile.py --rate 300 --seconds 20` (docs/decisions/0014-gateway-throughput.md).
It starts the bench's stack (reach.tooling.bench.gateway_stack: a no-op agent, an app, a gateway), replaces the gateway
by one run under cProfile, drives it open loop with the bench's load generator, stops it (SIGTERM: cProfile
writes on exit) and prints the top functions by own time and the gateway's CPU per accepted request.
"""

from __future__ import annotations

import argparse
import json
import pstats
import signal
from pathlib import Path

from reach.tooling.bench import cpu, noop_agent
from reach.tooling.bench.gateway_load import LoadResult
from reach.tooling.bench.gateway_stack import ENVELOPES, GatewayStack, child_env, envelope_body, post
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace
from reach.settings import ReachSettings, RedisSettings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=300.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/gateway.prof"))
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--no-profile", action="store_true", help="plain gateway: only CPU per request")
    args = parser.parse_args()
    ws = Workspace(topics_file=ReachSettings().topics_file)
    ws.ensure(ws.names.capability(noop_agent.CAPABILITY))
    ws.ensure(ws.names.inbox(noop_agent.AGENT_ID), "agent")
    env = child_env(ws.namespace, ws.kafka, home=ReachSettings().home, redis_url=RedisSettings().url(),
                    topics_file=ws.topics_file)
    stack = GatewayStack(env=env, kafka=ws.kafka)
    profiled: Child | None = None
    try:
        stack.start()
        assert stack.gateway is not None
        stack.gateway.stop()
        app = stack.signed_app()
        profiler = [] if args.no_profile else ["cProfile", "-o", str(args.out.resolve()), "-m"]
        profiled = Child("gwprof", [*profiler, "reach", "gateway", "--host", "127.0.0.1", "--port", str(stack.port)],
                         env)

        def accepts() -> bool:
            body = envelope_body()
            return post(stack.url + ENVELOPES, body, app.headers(body), timeout=5)[0] == 202

        profiled.wait_until(accepts, 60, "a 202")
        out = Path(profiled.dir) / "load.json"
        before = cpu.read({"gateway": profiled.pid})
        load = Child("load", ["reach.tooling.bench.gateway_load", stack.url, app.key_id, str(args.rate), str(args.seconds),
                              "1", str(out)], {"REACH_BENCH_SECRET": app.secret})
        load.proc.wait(args.seconds + 90)
        after = cpu.read({"gateway": profiled.pid})
        result = LoadResult(**json.loads(out.read_text()))
        load.stop()
        accepted = result.statuses.get("202", 0)
        used = (after["gateway"] or 0.0) - (before["gateway"] or 0.0)
        lat = sorted(result.latencies_ms)
        print(f"offered {args.rate:g}/s for {args.seconds:g}s: statuses {result.statuses}; gateway CPU "
              f"{used:.2f}s = {used / max(1, accepted) * 1000:.3f} ms per accepted request (incl. 1 s warm-up: "
              f"{used / max(1, int(args.rate * (args.seconds + 1))) * 1000:.3f} ms per sent); p50 "
              f"{lat[len(lat) // 2] if lat else 0:.1f} ms p99 {lat[len(lat) * 99 // 100] if lat else 0:.1f} ms")
        # SIGINT: uvicorn re-raises the signal it caught after shutting down; as KeyboardInterrupt it lets
        # cProfile write its file, where SIGTERM's default action would kill the process first
        profiled.proc.send_signal(signal.SIGINT)
        profiled.proc.wait(30)
        print("gateway log tail:\n" + profiled.tail(8))
        profiled.stop()
        profiled = None
        if not args.no_profile:
            stats = pstats.Stats(str(args.out))
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
    finally:
        if profiled is not None:
            profiled.stop()
        stack.stop()
        ws.delete()


if __name__ == "__main__":
    main()
