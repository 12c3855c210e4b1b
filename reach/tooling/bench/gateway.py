"""Mode `gateway`: signed POST /v1/envelopes at rising rates to one `reach gateway` process, beside direct Kafka
sends of the same envelopes at the same rates, in the same run.

Per rate: `generators` load-generator processes (reach/tooling/bench/gateway_load.py, httpx on loopback) share the
offered rate open loop; the row reports accepted/s (202s in the measured window), p50/p99 from sending to
the 202, the gateway's and the broker's CPU, and the generators' own CPU and send lag (so a saturated
generator is visible instead of passing for a slow gateway). The `kafka send` row publishes the same
envelope bytes open loop with the producer `reach send` uses (KafkaSettings.producer(): idempotent,
acks=all), timed from produce() to the broker's acknowledgement: what the gateway adds is the difference.
"""

from __future__ import annotations

import functools
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, Message

from reach.settings import ReachSettings, RedisSettings
from reach.tooling.bench import cpu, noop_agent
from reach.tooling.bench.gateway_load import LoadResult, LoadSummary, schedule, summary
from reach.tooling.bench.gateway_stack import GatewayStack, child_env
from reach.tooling.bench.results import ModeResult, latency, own_cpu, percentile
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace, message_id

ACCEPTED_TARGET_RPS = 1_000.0  # issue 13: one gateway process accepts >= 1,000 signed requests/s
P99_TARGET_MS = 50.0  # ... and answers 202 within 50 ms at p99 at 500/s
LAG_BOUND_MS = 20.0  # a generator sending later than this at p99 was itself the bottleneck


@dataclass(frozen=True)
class GatewayConfig:
    """Offered rates and the length of each step (keep the whole mode under two minutes here)."""

    rates: tuple[float, ...] = (250.0, 500.0, 1_000.0)
    seconds: float = 6.0
    warmup: float = 2.0
    generators: int = 2

    @classmethod
    def quick(cls) -> GatewayConfig:
        return cls(rates=(50.0,), seconds=1.0, warmup=0.5, generators=1)


def run(ws: Workspace, config: GatewayConfig) -> list[ModeResult]:
    """Both rows per rate; a build without `reach gateway` (or one that never answers 202) gives a skip row."""
    ws.ensure(ws.names.capability(noop_agent.CAPABILITY))
    ws.ensure(ws.names.inbox(noop_agent.AGENT_ID), "agent")
    env = child_env(ws.namespace, ws.kafka, home=ReachSettings().home, redis_url=RedisSettings().url(),
                    topics_file=ws.topics_file)
    out: list[ModeResult] = []
    stack = GatewayStack(env=env, kafka=ws.kafka)
    try:
        stack.start()
    except RuntimeError as exc:
        stack.stop()
        return [ModeResult.skip("gateway", f"no gateway answering 202 ({str(exc).splitlines()[0]})")]
    try:
        broker = cpu.broker_pid(ws.kafka.servers())
        for rate in config.rates:
            out.append(_gateway_step(stack, rate, config, broker))
            out.append(_kafka_step(ws, rate, config, broker))
    finally:
        stack.stop()
    return out


def _gateway_step(stack: GatewayStack, rate: float, config: GatewayConfig, broker: int | None) -> ModeResult:
    assert stack.gateway is not None and stack.agent is not None
    app = stack.signed_app()
    watched = {"gateway": stack.gateway.pid, "broker JVM": broker}
    before = cpu.read(watched)
    share = rate / config.generators
    generators = []
    for i in range(config.generators):
        result_file = Path(stack.gateway.dir) / f"load-{rate:g}-{i}.json"
        generators.append((result_file, Child(f"load{i}", ["reach.tooling.bench.gateway_load", stack.url, app.key_id,
                                                           str(share), str(config.seconds), str(config.warmup),
                                                           str(result_file)], {"REACH_BENCH_SECRET": app.secret})))
    deadline = time.monotonic() + config.warmup + config.seconds + 60
    for _, child in generators:
        try:
            child.proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            pass  # stopped below; its missing result file is reported
    after = cpu.read(watched)
    results = []
    for result_file, child in generators:
        if not result_file.exists():
            tail = child.tail()
            child.stop()
            return ModeResult.skip(f"gateway {rate:g}/s", f"a load generator wrote no result: {tail[-300:]}")
        results.append(LoadResult(**json.loads(result_file.read_text())))
        child.stop()
    return gateway_row(rate, summary(results), before, after, requests=schedule(rate, config.seconds,
                                                                                     config.warmup)[0])


def gateway_row(rate: float, load: LoadSummary, before: cpu.Reading, after: cpu.Reading, *,
                requests: int) -> ModeResult:
    """One gateway rate as a table row (pure: the generators' pooled results and two CPU readings)."""
    # accepted/s over the span from the first measured send to the last answer: a gateway that falls behind
    # answers the window's requests late, and the window alone would credit it with the offered rate
    window = max(load.window_s, load.span_s)
    accepted = load.statuses.get("202", 0)
    refused = {k: v for k, v in load.statuses.items() if k != "202"}
    generator_cores = load.cpu_s / load.wall_s if load.wall_s > 0 else 0.0
    lag_p99 = percentile(sorted(load.lag_ms), 99) if load.lag_ms else None
    by_process = cpu.per_1k(before, after, requests)
    by_process["load generators"] = round(load.cpu_s / requests * 1000, 4) if requests else None
    behind = lag_p99 is not None and lag_p99 > LAG_BOUND_MS
    return ModeResult(
        mode=f"gateway {rate:g}/s", messages=accepted, throughput=accepted / window if window else 0.0,
        latency=latency(load.latencies_ms, "signed POST sent -> 202 received"), cpu_per_1k=by_process.get("gateway"),
        lost=load.due - sum(load.statuses.values()), duplicated=0, offered_rate=rate, cpu_by_process=by_process,
        figures={"due": float(load.due), "accepted": float(accepted), "refused": float(sum(refused.values())),
                 "generator_cores": round(generator_cores, 3), "generator_lag_p99_ms": lag_p99},
        notes=(f"{accepted:,}/{load.due:,} accepted (202)"
               + (f", refused {refused}" if refused else "")
               + f"; load generators used {generator_cores:.2f} cores, sent p99 {_fmt(lag_p99)} ms late"
               + (" (the generator was the bottleneck)" if behind else "")),
    )


def _kafka_step(ws: Workspace, rate: float, config: GatewayConfig, broker: int | None) -> ModeResult:
    """The same envelopes straight to the capability topic, open loop, produce() -> broker ack."""
    topic = ws.names.capability(noop_agent.CAPABILITY)
    producer = ws.producer(profile="hot")
    total, skip = schedule(rate, config.seconds, config.warmup)
    acked: list[float] = []
    failed = [0]

    def delivered(sent: float, measured: bool, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            failed[0] += 1
        elif measured:
            acked.append((time.perf_counter() - sent) * 1000)

    # the first record waits for connections and the producer id: before the clock starts
    producer.produce(topic, value=ws.envelope(message_id(f"kafka{rate:g}", total), noop_agent.CAPABILITY))
    producer.flush(30)
    watched = {"broker JVM": broker}
    before, cpu0 = cpu.read(watched), own_cpu()
    start = time.perf_counter() + 0.05
    for i in range(total):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        sent = time.perf_counter()
        value = ws.envelope(message_id(f"kafka{rate:g}", i), noop_agent.CAPABILITY)
        producer.produce(topic, value=value, on_delivery=functools.partial(delivered, sent, i >= skip))
        producer.poll(0)
    producer.flush(60)
    after = cpu.read(watched)
    by_process = cpu.per_1k(before, after, total)
    by_process["sender (this process)"] = round((own_cpu() - cpu0) / total * 1000, 4) if total else None
    return ModeResult(
        mode=f"kafka send {rate:g}/s", messages=len(acked), throughput=len(acked) / config.seconds,
        latency=latency(acked, "produce() -> broker ack"), cpu_per_1k=by_process["sender (this process)"],
        lost=total - skip - len(acked), duplicated=0,
        offered_rate=rate, cpu_by_process=by_process,
        notes="the producer `reach send` uses (idempotent, acks=all), open loop, same envelope bytes")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
