"""Counts a process's Redis round trips and commands, for scripts/agent_cost.py (`--redis-trips`), and its Kafka
requests by API (`--kafka-requests`).

Put on a child's PYTHONPATH with REACH_COST_REDIS_TRIPS=<file>: every write of redis-py's asyncio connections (one
command, or one whole pipeline, before its replies are read) counts one round trip, every packed command one
command; the totals are written to the file every 0.2 s. It counts redis-py itself, so it measures any source tree
(the code before a change as well as after) without touching it.

With REACH_COST_KAFKA_REQUESTS=1 as well, every confluent_kafka client the process builds reports librdkafka's
statistics every 0.2 s, and the file also holds `kafka_<API>` (Produce, Fetch, OffsetCommit, ...): the requests
its clients sent, summed over clients and brokers (librdkafka's per-broker `req` counters). The broker counts every
client of the broker; this counts one process's."""

from __future__ import annotations

import gc
import json
import os
import threading
import time

_PATH = os.environ.get("REACH_COST_REDIS_TRIPS")

if _PATH:
    from redis.asyncio.connection import AbstractConnection

    _counts: dict[str, int] = {"round_trips": 0, "commands": 0}
    _send = AbstractConnection._send_packed_command
    _pack = AbstractConnection.pack_command

    async def _counted_send(self, command):  # type: ignore[no-untyped-def]
        _counts["round_trips"] += 1
        return await _send(self, command)

    def _counted_pack(self, *args):  # type: ignore[no-untyped-def]
        _counts["commands"] += 1
        return _pack(self, *args)

    _gc_start = [0.0]

    def _gc_timed(phase: str, info: dict[str, int]) -> None:
        # the collector's own CPU time (its thread's), per generation: what the agent's garbage costs per message
        if phase == "start":
            _gc_start[0] = time.thread_time()
        else:
            key = f"gc{info['generation']}_us"
            _counts[key] = _counts.get(key, 0) + int((time.thread_time() - _gc_start[0]) * 1e6)
            _counts[f"gc{info['generation']}_runs"] = _counts.get(f"gc{info['generation']}_runs", 0) + 1

    gc.callbacks.append(_gc_timed)
    AbstractConnection._send_packed_command = _counted_send  # type: ignore[method-assign]
    AbstractConnection.pack_command = _counted_pack  # type: ignore[method-assign]

    def _dump(path: str) -> None:
        while True:
            with open(path + ".tmp", "w") as out:
                json.dump(_counts, out)
            os.replace(path + ".tmp", path)
            time.sleep(0.2)

    if os.environ.get("REACH_COST_KAFKA_REQUESTS"):
        import confluent_kafka

        _clients: dict[str, dict[str, int]] = {}
        _lock = threading.Lock()

        def _stats(raw: str) -> None:
            stats = json.loads(raw)
            sent: dict[str, int] = {}
            for broker in stats.get("brokers", {}).values():
                for api, n in (broker.get("req") or {}).items():
                    if n:
                        sent[api] = sent.get(api, 0) + n
            with _lock:
                _clients[stats.get("name", "?")] = sent
                totals: dict[str, int] = {}
                for counts in _clients.values():
                    for api, n in counts.items():
                        totals[f"kafka_{api}"] = totals.get(f"kafka_{api}", 0) + n
                _counts.update(totals)

        def _counted(conf: dict[str, object]) -> dict[str, object]:
            if str(conf.get("bootstrap.servers", "")).startswith("memory://"):
                return conf
            return {**conf, "statistics.interval.ms": 200, "stats_cb": _stats}

        class _Producer(confluent_kafka.Producer):  # type: ignore[misc]
            def __init__(self, conf: dict[str, object], **kwargs: object) -> None:
                super().__init__(_counted(conf), **kwargs)

        class _Consumer(confluent_kafka.Consumer):  # type: ignore[misc]
            def __init__(self, conf: dict[str, object], **kwargs: object) -> None:
                super().__init__(_counted(conf), **kwargs)

        confluent_kafka.Producer = _Producer  # type: ignore[misc,assignment]
        confluent_kafka.Consumer = _Consumer  # type: ignore[misc,assignment]

    threading.Thread(target=_dump, args=(_PATH,), name="redis-trips", daemon=True).start()
