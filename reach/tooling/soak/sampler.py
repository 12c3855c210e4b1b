"""One soak sample: RSS and open file descriptors of each process, Redis memory and keys, the status table's
RocksDB size, the run's topic count and its consumer lag. A reading that fails is left out, never fatal."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from reach.names import Names
from reach.settings import KafkaSettings
from reach.streams.lag import consumer_lag
from reach.tooling.soak.growth import Kind

log = logging.getLogger("reach.tooling.soak")
MIB = 1024 * 1024


@dataclass(frozen=True)
class Sample:
    """Values read at `at_s` seconds into the run, keyed by (kind, series label)."""

    at_s: float
    values: dict[tuple[Kind, str], float] = field(default_factory=dict)


def process_readings(processes: Mapping[str, int]) -> dict[tuple[Kind, str], float]:
    """RSS (MiB) and open fds of each labelled pid, its children included (a router that forks counts whole)."""
    out: dict[tuple[Kind, str], float] = {}
    for label, pid in processes.items():
        try:
            proc = psutil.Process(pid)
            family = [proc, *proc.children(recursive=True)]
            rss = fds = 0
            for p in family:
                try:
                    rss += p.memory_info().rss
                    fds += p.num_fds()
                except psutil.Error:
                    continue  # a child that exited between listing and reading
        except psutil.Error:
            continue  # gone: this sample has no value for it
        out[(Kind.RSS, label)] = rss / MIB
        out[(Kind.FDS, label)] = float(fds)
    return out


def redis_readings(url: str) -> dict[tuple[Kind, str], float]:
    try:
        with redis.Redis.from_url(url, socket_timeout=5) as client:
            used = int(client.info("memory")["used_memory"])
            keys = int(client.dbsize())
    except (redis.RedisError, OSError) as exc:
        log.warning("redis sample failed: %s", exc)
        return {}
    return {(Kind.REDIS_MEMORY, "redis"): used / MIB, (Kind.REDIS_KEYS, "redis"): float(keys)}


def dir_mib(paths: list[Path]) -> float:
    """Bytes on disk under the given directories (the routers' data dirs: the status table's RocksDB)."""
    total = 0
    for root in paths:
        for f in root.rglob("*"):
            try:
                if f.is_file():
                    total += f.stat().st_size
            except OSError:
                continue  # compaction removed it meanwhile
    return total / MIB


class KafkaReader:
    """Topic count of the run (its namespace and the router's internal topics) and lag per consumer group."""

    def __init__(self, *, kafka: KafkaSettings, names: Names, groups: list[str]) -> None:
        self.names, self.groups = names, groups
        self._admin = AdminClient(kafka.admin(log_level=2))
        self._reader = Consumer(kafka.consumer(f"{names.namespace}.soak-lag", log_level=2))

    def readings(self) -> dict[tuple[Kind, str], float]:
        out: dict[tuple[Kind, str], float] = {}
        try:
            topics = self._admin.list_topics(timeout=15).topics
            out[(Kind.TOPICS, "namespace")] = float(sum(1 for t in topics if t.startswith(f"{self.names.namespace}.")
                                                      or t.startswith(f"{self.names.router_app_id}-")))
            lag = consumer_lag(self._admin, self._reader, self.groups)
        except Exception as exc:  # noqa: BLE001 - a sample the broker did not answer is skipped, not fatal
            log.warning("kafka sample failed: %s", exc)
            return out
        for group in self.groups:
            out[(Kind.LAG, group)] = float(sum(n for (_t, g), n in lag.items() if g == group))
        return out

    def close(self) -> None:
        self._reader.close()
