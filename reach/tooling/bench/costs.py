"""Where a request's cost goes, besides CPU: broker requests by type and Redis commands, per request.

Both are read from the server side, so every client counts (librdkafka's and faust's aiokafka consumers, the
agent SDK's Redis scripts, the router's fence): the broker's `kafka.network:RequestMetrics RequestsPerSec`
counts (by API, summed over versions) through the JDK's attach API (`BrokerRequests.java`, run by `java` as a
single-file program attached to the local broker's pid for the whole bench), and Redis's `INFO commandstats`
calls. A reading is a few MBean reads in the broker and one INFO in Redis. A remote broker, or a machine without
`java`, reads as None: the figures are left out, never guessed.

Two more figures come from the processes and the topics, when the stack gives their sources: Redis round trips
(the processes' own `reach_redis_round_trips_total`, served by `reach.tooling.bench.metered`: the server's
command counts are every client's, other users of a shared Redis included) and records produced, by topic family
(`reach.tooling.bench.records`). The window's edges are read so that the readers' own requests fall outside it.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import redis
import redis.cluster
from confluent_kafka.admin import AdminClient

from reach.redisclient import SyncRedis, sync_client
from reach.tooling.bench import metered, records

log = logging.getLogger(__name__)

PROGRAM = Path(__file__).with_name("BrokerRequests.java")
CONTROL_PLANE = frozenset({
    "BrokerHeartbeat", "BrokerRegistration", "ControllerRegistration", "Vote", "BeginQuorumEpoch",
    "EndQuorumEpoch", "DescribeQuorum", "FetchSnapshot", "AddRaftVoter", "RemoveRaftVoter", "UpdateRaftVoter",
    "AlterPartition", "AssignReplicasToDirs", "UpdateFeatures",
})
"""KRaft's own requests between broker and controller: not caused by traffic, left out of the figures."""
ALIASES = frozenset({"FetchConsumer", "FetchFollower"})
"""The broker counts every Fetch a second time under one of these names: left out so nothing counts twice."""
COUNTED = ("Produce", "Fetch", "OffsetCommit", "Heartbeat", "Metadata")
"""Request types shown one by one; the rest are summed under `other`."""


class BrokerCounter:
    """One JVM attached to the local broker for the whole bench, answering a reading per line (a few ms)."""

    def __init__(self, pid: int | None) -> None:
        self._proc: subprocess.Popen[str] | None = None
        java = shutil.which("java")
        if pid is None or java is None:
            return
        try:
            self._proc = subprocess.Popen([java, str(PROGRAM), str(pid)], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            log.warning("broker request counts unreadable: %s", exc)
            return
        if self._line() is None:  # "{}" once attached
            self.close()

    def read(self) -> dict[str, int] | None:
        """The broker's data-plane request counts by API since it started; None when they cannot be read."""
        if self._proc is None or self._proc.stdin is None:
            return None
        try:
            self._proc.stdin.write("\n")
            self._proc.stdin.flush()
        except OSError:
            self.close()
            return None
        line = self._line()
        if line is None:
            return None
        counts: dict[str, int] = json.loads(line)
        return {api: n for api, n in counts.items() if api not in CONTROL_PLANE | ALIASES}

    def close(self) -> None:
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def _line(self) -> str | None:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if line.startswith("{"):
            return line
        err = self._proc.stderr.read()[-300:] if self._proc.poll() is not None and self._proc.stderr else ""
        log.warning("broker request counts unreadable: %s", err.strip() or "the reader exited")
        self.close()
        return None


def redis_commands(client: SyncRedis | None) -> dict[str, int] | None:
    """Redis's calls by command since it started (INFO commandstats) and its used memory, summed over a cluster's
    masters; None without one."""
    if client is None:
        return None
    nodes: list[redis.Redis] = ([n.redis_connection for n in client.get_primaries()]
                                if isinstance(client, redis.cluster.RedisCluster) else [client])
    calls: dict[str, int] = {}
    try:
        for node in nodes:
            for name, row in node.info("commandstats").items():
                calls[name.removeprefix("cmdstat_")] = calls.get(name.removeprefix("cmdstat_"), 0) + int(row["calls"])
            calls["used_memory_bytes"] = calls.get("used_memory_bytes", 0) + int(node.info("memory")["used_memory"])
    except redis.RedisError as exc:
        log.warning("redis command counts unreadable: %s", exc)
        return None
    return calls


@dataclass(frozen=True, slots=True)
class Reading:
    broker: dict[str, int] | None = None
    redis: dict[str, int] | None = None
    counters: dict[str, dict[str, float] | None] | None = None  # label -> the metered process's counters
    offsets: records.Offsets | None = None  # topic -> end offset, the namespace's topics


@dataclass(frozen=True, slots=True)
class Topics:
    """Where records are counted: the namespace's topics, through an admin client."""

    admin: AdminClient
    namespace: str


class Costs:
    """The readers of one bench stack: the broker's counter, one Redis connection (connecting counts too), the
    metered processes' ports and the namespace's topics."""

    def __init__(self, broker_pid: int | None, redis_url: str | None, *, ports: dict[str, int] | None = None,
                 topics: Topics | None = None) -> None:
        self.broker = BrokerCounter(broker_pid)
        self.redis = sync_client(redis_url, socket_timeout=5) if redis_url else None
        self.ports = ports or {}
        self.topics = topics

    def read(self, *, opening: bool = True) -> Reading:
        """A reading; `opening` (a window's start) reads offsets and counters first, a closing one last, so the
        ListOffsets and Metadata requests of the reading itself stay out of the broker's counts."""
        if opening:
            offsets, counters = self._offsets(), self._counters()
            return Reading(self.broker.read(), redis_commands(self.redis), counters, offsets)
        broker, redis_calls = self.broker.read(), redis_commands(self.redis)
        return Reading(broker, redis_calls, self._counters(), self._offsets())

    def _counters(self) -> dict[str, dict[str, float] | None] | None:
        return metered.read_all(self.ports) if self.ports else None

    def _offsets(self) -> records.Offsets | None:
        return records.end_offsets(self.topics.admin, self.topics.namespace) if self.topics else None

    def close(self) -> None:
        self.broker.close()
        if self.redis is not None:
            self.redis.close()


def per_request(before: Reading, after: Reading, requests: int,
                namespace: str | None = None) -> dict[str, float | None]:
    """Broker requests (total and by type) and Redis commands per request between two readings, the Redis
    memory it grew by per 1,000 requests, the processes' Redis round trips and the records produced per request
    (by topic family of `namespace`); the figures that cannot be read are absent."""
    if requests <= 0:
        return {}
    out: dict[str, float | None] = {}
    if before.counters is not None and after.counters is not None:
        out.update(metered.per_request(before.counters, after.counters, requests))
    if namespace is not None:
        out.update(records.per_request(before.offsets, after.offsets, requests, namespace))
    if before.broker is not None and after.broker is not None:
        spent = _delta(before.broker, after.broker)
        out["broker_requests_per_request"] = round(sum(spent.values()) / requests, 3)
        for api in sorted({*COUNTED, *spent}):  # every type in the JSON; the table shows COUNTED and the rest
            out[f"broker_{api}_per_request"] = round(spent.get(api, 0) / requests, 3)
        other = sum(n for api, n in spent.items() if api not in COUNTED)
        out["broker_other_per_request"] = round(other / requests, 3)
    if before.redis is not None and after.redis is not None:
        grown = after.redis.get("used_memory_bytes", 0) - before.redis.get("used_memory_bytes", 0)
        spent = _delta({k: v for k, v in before.redis.items() if k != "used_memory_bytes"},
                       {k: v for k, v in after.redis.items() if k != "used_memory_bytes"})
        spent.pop("info", None)  # the readings' own
        out["redis_commands_per_request"] = round(sum(spent.values()) / requests, 3)
        out["redis_bytes_per_1k_requests"] = round(grown / requests * 1000)
    return out


def _delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    return {key: after[key] - before.get(key, 0) for key in after if after[key] > before.get(key, 0)}
