"""The request path in one process: the real router, status fold, delay tiers, timekeeper and agent runner on an
in-memory bus (reach.kafka.memory, REACH_BOOTSTRAP=memory://<name>) and an in-memory Redis (fakeredis's TCP
server, Lua included). No broker, no Redis server; see docs/architecture.md, "Running the request path in memory"."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client import CollectorRegistry

from reach.agent import Agent
from reach.agent.runner import Runner
from reach.channels.closure import ChannelCallbacks
from reach.core.lifecycle import StatusRow
from reach.envelopes import now_ms
from reach.intent.unroutable import IntentHandoff
from reach.kafka import clients, codec, memory, topics
from reach.metrics import Metrics
from reach.names import Names
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.delays.forwarder import DelayForwarder
from reach.streams.router.route_loop import Router
from reach.streams.status.fold import StatusFold
from reach.streams.timekeeper.sweep import Timekeeper

ROOT = Path(__file__).resolve().parents[3]
T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not seen within {timeout:.1f}s")
        time.sleep(0.02)


@contextmanager
def fake_redis() -> Iterator[str]:
    """A Redis URL served by fakeredis in this process (Lua scripts run on lupa)."""
    from fakeredis import TcpFakeServer

    server = TcpFakeServer(("127.0.0.1", 0), server_type="redis")
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-redis", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"redis://{host}:{port}/0"
    finally:
        server.shutdown()
        server.server_close()


class MemoryStack:
    """The stream app's workers (router, fold, delay tiers, timekeeper ticks) plus agent runners, started here."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.kafka = KafkaSettings()
        self.settings = ReachSettings()
        self.redis = RedisSettings()
        self.names = Names(self.settings.namespace)
        spec = topics.load(self.settings.topics_file)
        self.tiers = spec.retry_tiers()
        admin = clients.admin(self.kafka)
        topics.apply(admin, topics.plan(admin, spec.resolved(self.names)))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._runners: list[Runner] = []
        self.errors: list[str] = []  # what stopped a worker or a runner: the test fails on any
        self.router = Router(kafka=self.kafka, reach=self.settings, redis=self.redis, metadata_refresh_ms=200,
                             handoff=IntentHandoff())
        self.fold = StatusFold(names=self.names, kafka=self.kafka, metrics=Metrics(CollectorRegistry()),
                               state_dir=tmp / "status", url="http://127.0.0.1:1", retention_ms=3_600_000,
                               callbacks=ChannelCallbacks())
        self.delays = DelayForwarder(names=self.names, tiers=self.tiers, kafka=self.kafka, poll_s=0.05,
                                     redis=self.redis)
        self.timekeeper = Timekeeper(names=self.names, tiers=self.tiers, kafka=self.kafka,
                                     policy=self.router.state.control.policy, redis=self.redis)

    def start(self) -> MemoryStack:
        self.fold.start()
        self.router.start(ready_timeout=10)
        self.delays.start()
        self._spawn("timekeeper", self._keep_time)
        return self

    def _keep_time(self) -> None:
        """What the stream app's timer does every 0.5 s (reach.streams.app), every 50 ms here."""
        while not self._stop.wait(0.05):
            rows = self.fold.due_rows(now_ms())
            if rows:
                self.timekeeper.tick(rows)

    def _spawn(self, name: str, target: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - reported by stop(), which fails the test
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=f"e2e-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def run_agent(self, agent: Agent) -> Runner:
        """Run an agent instance on a thread of its own; wait until the router can route to it."""
        runner = Runner(agent, kafka=self.kafka, redis=self.redis, settings=self.settings)
        self._runners.append(runner)
        self._spawn(agent.instance_id, lambda: runner.run(install_signals=False))
        wait_for(lambda: any(r.instance_id == agent.instance_id for r in self.router.state.live(now_ms())), 5,
                 f"{agent.instance_id} live in the router's registry")
        return runner

    def row(self, message_id: str) -> StatusRow | None:
        return self.fold.row(message_id)

    def rows(self) -> list[StatusRow]:
        """Every row of the status table (the fold owns every partition here)."""
        return [row for mid in self._message_ids() if (row := self.fold.row(mid)) is not None]

    def _message_ids(self) -> set[str]:
        return {record.key.decode() for log in self._bus().topics[self.names.receipts].partitions for record in log
                if record.key}

    def _bus(self) -> memory.Bus:
        return memory.bus(self.kafka.servers().removeprefix(memory.SCHEME))

    def receipts(self, message_id: str) -> list[dict[str, Any]]:
        """Every receipt of the message on the receipts topic, in order."""
        logs = self._bus().topics[self.names.receipts].partitions
        found = [codec.decode_dict("Receipt", record.value) for log in logs for record in log
                 if record.key == message_id.encode() and record.value]
        return sorted(found, key=lambda r: r["at"])

    def stop(self) -> None:
        for runner in self._runners:
            runner.stop()
        self._stop.set()
        for worker in (self.router, self.fold, self.delays):
            if worker.error is not None:
                self.errors.append(f"{type(worker).__name__}: {worker.error!r}")
        with ThreadPoolExecutor(3) as pool:  # each finishes its batch and flushes: side by side, not in turn
            list(pool.map(lambda worker: worker.stop(5), (self.delays, self.router, self.fold)))
        for thread in self._threads:
            thread.join(5)
        assert not self.errors, f"workers failed: {self.errors}"


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[MemoryStack]:
    """A fresh bus, Redis and namespace per test, with the stream app's workers running. Records are framed
    single-object from the schema files (REACH_SCHEMA_REGISTRY_URL=mock://<name> would frame them through
    confluent-kafka's in-memory registry instead: one per process, like the codec's wire codec)."""
    bus = f"e2e-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REACH_BOOTSTRAP", memory.SCHEME + bus)
    monkeypatch.setenv("REACH_NAMESPACE", "t" + uuid.uuid4().hex[:8])
    monkeypatch.setenv("REACH_TOPICS_FILE", str(ROOT / "topics.yaml"))
    monkeypatch.setenv("REACH_WEB_PORT", "1")  # no status view here: the agent's durable check is refused at once
    monkeypatch.delenv("REACH_SCHEMA_REGISTRY_URL", raising=False)
    monkeypatch.setattr(codec, "_wire", None)  # single-object framing until an entry point names a registry
    monkeypatch.setattr(codec, "_wire_url", None)
    with fake_redis() as url:
        monkeypatch.setenv("REACH_REDIS_URL", url)
        running = MemoryStack(tmp_path).start()
        try:
            yield running
        finally:
            running.stop()
            memory.forget(bus)
