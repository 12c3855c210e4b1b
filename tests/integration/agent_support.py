"""Helpers for the agent integration tests: topic readers, in-process and subprocess agents, polling."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from reach.agent import Agent
from reach.agent.startgate import STARTED_AT
from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.kafka import codec, topics
from reach.names import Names
from reach.records import Receipt, Status
from reach.registry import read_registry
from reach.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, what: str = "condition",
             interval: float = 0.05) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def starts(receipts: list[Receipt]) -> list[Receipt]:
    """The receipts that mark a run's start: STARTED, or a terminal carrying `started_at` (a run that ended within
    the SDK's grace sends no STARTED, reach.agent.startgate); a republished copy of that terminal (a cache hit, a
    re-send) carries the same start and is not another run."""
    out, seen = [], set()
    for r in receipts:
        if r.status is Status.STARTED:
            out.append(r)
        elif STARTED_AT in r.timings and (r.attempt, r.timings[STARTED_AT]) not in seen:
            seen.add((r.attempt, r.timings[STARTED_AT]))
            out.append(r)
    return out


def start_at(receipt: Receipt) -> int:
    """When the run a start-marking receipt (see `starts`) stands for began."""
    return receipt.timings.get(STARTED_AT, receipt.at)


def with_starts(receipts: list[Receipt]) -> list[Status]:
    """The receipts' statuses, a terminal that carries `started_at` preceded by the STARTED it stands for."""
    return [s for r in receipts for s in ([Status.STARTED] if STARTED_AT in r.timings else []) + [r.status]]


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes]
    partition: int
    offset: int


class TopicReader:
    """Reads a whole topic from the beginning and keeps everything it saw."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.records: list[Record] = []
        self._consumer = Consumer(KafkaSettings().consumer(f"test-reader-{uuid.uuid4().hex[:8]}"))
        meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])

    def poll(self, seconds: float = 0.3) -> list[Record]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.1)
            if msg is None or msg.error():
                continue
            headers = {k: (v if isinstance(v, bytes) else str(v).encode()) for k, v in (msg.headers() or [])}
            self.records.append(Record(msg.key(), msg.value(), headers, msg.partition() or 0, msg.offset() or 0))
        return self.records

    def close(self) -> None:
        self._consumer.close()


class Receipts(TopicReader):
    """The receipts topic, decoded and grouped by message_id."""

    def by_message(self) -> dict[str, list[Receipt]]:
        out: dict[str, list[Receipt]] = {}
        for rec in self.poll():
            if rec.value is not None:
                receipt = codec.decode(rec.value, Receipt)
                out.setdefault(receipt.message_id, []).append(receipt)
        return out

    def wait_status(self, message_ids: list[str], status: Status, timeout: float = 30) -> dict[str, list[Receipt]]:
        """Wait until every message has a receipt with `status`; returns all receipts by message."""
        def check() -> dict[str, list[Receipt]] | None:
            seen = self.by_message()
            ok = all(any(r.status is status for r in seen.get(m, [])) for m in message_ids)
            return seen if ok else None

        return wait_for(check, timeout, f"{status} for {len(message_ids)} message(s)")


@contextmanager
def running(agent: Agent) -> Iterator[threading.Thread]:
    """Run an agent in a thread of this process; stop it (drain + tombstone) on exit."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            agent.run(install_signals=False)
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"agent-{agent.instance_id}", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        agent.stop()
        thread.join(timeout=60)
        assert not thread.is_alive(), "agent did not stop within 60s"
        if errors:
            raise errors[0]


def spawn(target: str, **env: str) -> subprocess.Popen[bytes]:
    """`python -m reach agent run TARGET` from the repo root with this test's REACH_* environment."""
    return subprocess.Popen([sys.executable, "-m", "reach", "agent", "run", target], cwd=ROOT,
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def reach_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the `reach` command line and capture its output."""
    return subprocess.run([sys.executable, "-m", "reach", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def owning_partitions(names: Names, agents: list[Agent]) -> bool:
    """Whether every agent's instance is live in the registry with inbox partitions assigned (ready to be routed to)."""
    try:
        live = read_registry(KafkaSettings(), names).live(now_ms())
    except InfraUnavailable:
        return False
    ids = {r.instance_id for r in live if r.assigned_partitions}
    return all(a.instance_id in ids for a in agents)


@contextmanager
def all_running(agents: list[Agent]) -> Iterator[None]:
    """Run every agent in a thread of this process (`running`); stop them all on exit."""
    with ExitStack() as stack:
        for agent in agents:
            stack.enter_context(running(agent))
        yield


def inbox_partitions(agent_id: str) -> int:
    """The partitions of `agent_id`'s inbox as the SDK and the tests' helpers create it (REACH_TOPICS_FILE's
    `families.agent`, sized by agent: decision 0068)."""
    return topics.load(Path(os.environ.get("REACH_TOPICS_FILE", "topics.yaml"))).inbox(agent_id).partitions
