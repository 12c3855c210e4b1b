"""Mode `peers`: Reach's knee beside a plain confluent-kafka request-reply and FastStream's, in one run.

Each peer is a request-reply on two topics of the bench's namespace (4 partitions each, like a capability topic):
a client process (`reach.tooling.bench.peer_client`) sends requests open-loop at the step's rate and reads the
replies; one worker process answers them, `reach.tooling.bench.peer_worker` (plain confluent-kafka: batch
consume, one reply each, flush, commit with one in flight) or `reach.tooling.bench.faststream_worker` (FastStream's
confluent broker, `max_workers` concurrent handlers). The knee search, its criterion (>= 99.9% answered, p99 <=
100 ms from created_at to the reply's record timestamp, the point Reach's COMPLETED receipt marks), the step
lengths, the settling and the repeats are the knee mode's; only the upper bound is the peers' own, since a plain
request-reply passes far above Reach's. Every step reads CPU per request of the client, the worker and the broker
JVM, broker requests and records produced per request, as the knee does for Reach.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reach.tooling.bench import costs, cpu
from reach.tooling.bench.bisection import search
from reach.tooling.bench.knee import KneeConfig, Run, Search, Step, load, settle
from reach.tooling.bench.results import Latency
from reach.tooling.bench.slo import verdict
from reach.tooling.bench.subprocesses import Child, Commanded
from reach.tooling.bench.workspace import Workspace

PEERS = ("plain", "faststream")
REACH = "noop"
"""The Reach set-up the peers are compared with: one no-op agent behind the stream app (the knee's `noop`)."""


@dataclass(frozen=True)
class PeersConfig:
    """Which peers, the search's upper bound for them, and FastStream's concurrent handlers."""

    peers: tuple[str, ...] = PEERS
    high: float = 50_000.0  # known bad for a peer (a plain request-reply held ~24,000/s on an idle two-core machine)
    workers: int = 16

    @classmethod
    def quick(cls, **changes: Any) -> PeersConfig:
        return cls(**{"high": 25.0, **changes})


def missing(peer: str) -> str | None:
    """Why a peer cannot run on this installation, or None."""
    if peer == "faststream" and importlib.util.find_spec("faststream") is None:
        return "faststream is not installed (pip install 'faststream[confluent]', in the dev extras)"
    return None


class PeerClient(Commanded):
    """The client process, driven by one JSON command a line (reach.tooling.bench.peer_client)."""

    def __init__(self, requests: str, replies: str, env: dict[str, str]) -> None:
        super().__init__("peers' client", ["reach.tooling.bench.peer_client", requests, replies], env)


@dataclass
class PeerStack:
    """A running peer: its worker and client, the broker's pid, and the readers of its costs."""

    name: str
    worker: Child
    client: PeerClient
    broker: int | None
    meters: costs.Costs
    namespace: str
    seen: dict[str, int] = field(default_factory=dict)

    def processes(self) -> dict[str, int | None]:
        return {"client": self.client.pid, "worker": self.worker.pid, "broker JVM": self.broker}


def worker_args(peer: str, requests: str, replies: str, group: str, workers: int) -> list[str]:
    """The worker child's `python -m` arguments."""
    if peer == "plain":
        return ["reach.tooling.bench.peer_worker", requests, replies, group]
    if peer == "faststream":
        return ["reach.tooling.bench.faststream_worker", requests, group, str(workers)]
    raise ValueError(f"unknown peer {peer!r}: expected one of {', '.join(PEERS)}")


@contextmanager
def peer_stack(ws: Workspace, peer: str, workers: int) -> Iterator[PeerStack]:
    """The peer's topics, worker and client, ready: a probe request has had its reply."""
    requests = ws.ensure(ws.names.topic(f"bench.peers.{peer}.requests"))
    replies = ws.ensure(ws.names.topic(f"bench.peers.{peer}.replies"))
    env = {"REACH_BOOTSTRAP": ws.kafka.servers()}
    worker = Child(f"{peer} worker", worker_args(peer, requests, replies, f"{ws.namespace}.peers.{peer}", workers), env)
    client: PeerClient | None = None
    broker = cpu.broker_pid(ws.kafka.servers())
    meters = costs.Costs(broker, None, topics=costs.Topics(ws.admin, ws.namespace))
    try:
        client = PeerClient(requests, replies, env)
        deadline = time.monotonic() + 120
        while not client.ask(op="probe", timeout_s=5).get("ready"):
            if not worker.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the {peer} worker answered no request within 120 s:\n{worker.tail()}")
        yield PeerStack(peer, worker, client, broker, meters, ws.namespace)
    finally:
        if client is not None:
            client.stop()
        worker.stop()
        meters.close()


def run(ws: Workspace, knee: KneeConfig, config: PeersConfig) -> list[Search]:
    """The knee search of every configured peer, with the knee mode's criterion and step lengths."""
    out = []
    for peer in config.peers:
        result = Search(peer, skipped=missing(peer))
        out.append(result)
        if result.skipped:
            continue
        with peer_stack(ws, peer, config.workers) as stack:
            for repeat in range(knee.repeats):
                started, steps = time.monotonic(), list[Step]()
                before = load()

                def passes(rate: float, repeat: int = repeat, steps: list[Step] = steps, peer: str = peer) -> bool:
                    step = _step(stack, knee, rate=rate, tag=f"{peer}r{repeat}s{len(steps)}")
                    steps.append(step)
                    return step.verdict.passed

                found = search(passes, low=knee.low, high=config.high, resolution=knee.resolution)
                result.runs.append(Run(found, steps, before, load(), time.monotonic() - started))
            end = stack.client.ask(op="missing", wait_s=knee.drain_timeout)
            result.lost, result.duplicated = int(end["missing"]), int(end["duplicated"])
    return out


def _step(stack: PeerStack, config: KneeConfig, *, rate: float, tag: str) -> Step:
    if not stack.worker.alive():
        raise RuntimeError(f"the {stack.name} worker exited during the knee search:\n{stack.worker.tail()}")
    stack.client.ask(op="step", tag=f"{tag}w", rate=rate, count=max(int(rate * config.warmup), 5),
                     drain_s=config.drain_timeout)
    spent_before, before = stack.meters.read(), cpu.read(stack.processes())
    count = max(int(rate * config.seconds), 10)
    answer = stack.client.ask(op="step", tag=f"{tag}m", rate=rate, count=count, drain_s=config.drain_timeout)
    per_process = cpu.per_1k(before, cpu.read(stack.processes()), count)
    spent = costs.per_request(spent_before, stack.meters.read(opening=False), count, stack.namespace)
    read = answer.get("read_latency")
    if read:
        spent.update({"reply_read_p50_ms": read["p50"], "reply_read_p99_ms": read["p99"]})
    settle_s, settled = settle({"worker": stack.worker.pid}, config.settle_timeout)
    messages, replied = int(answer["messages"]), int(answer["replied"])
    lat = Latency(**answer["latency"]) if answer.get("latency") else None
    judged = verdict(messages, replied, {"REPLIED": replied} if replied else {}, lat)
    return Step(rate, judged, per_process, per_process.get("worker"), replied == messages, settle_s, settled, spent)


def ratios(knees: dict[str, float | None]) -> dict[str, float | None]:
    """Reach's knee over each peer's, from the knees by set-up (`noop` is Reach's); None where one is missing."""
    reach = knees.get(REACH)
    return {f"reach_over_{peer}": (round(reach / knees[peer], 4) if reach and knees.get(peer) else None)  # type: ignore[operator]
            for peer in PEERS}
