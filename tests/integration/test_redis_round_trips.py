"""`reach_redis_round_trips_total` counts what reaches the real Redis: one per command sent alone, one per pipeline
or script call, for blocking and asyncio clients alike (docs/decisions/0058-peers-and-per-request-figures.md)."""

from __future__ import annotations

import asyncio
import uuid

from reach.redisclient import ROUND_TRIPS, async_client, sync_client
from tests.integration.conftest import Infra


def _count() -> float:
    return float(ROUND_TRIPS._value.get())  # the process-wide counter, as a scrape reads it


def test_a_pipeline_is_one_round_trip_and_a_command_alone_is_one(infra: Infra) -> None:
    client = sync_client(infra.redis_url, socket_timeout=5)
    key = f"rt-{uuid.uuid4().hex}"
    try:
        client.ping()  # the connection and its handshake are counted before the measured calls
        start = _count()
        client.set(key, "1", ex=60)
        pipe = client.pipeline(transaction=False)
        for _ in range(10):
            pipe.incr(key)
        assert pipe.execute()[-1] == 11
        script = client.register_script("return redis.call('GET', KEYS[1])")
        assert script(keys=[key]) == b"11"
        assert _count() - start == 3
    finally:
        client.delete(key)
        client.close()


def test_the_asyncio_client_counts_the_same_way(infra: Infra) -> None:
    async def scenario() -> float:
        client = async_client(infra.redis_url, socket_timeout=5)
        key = f"rt-{uuid.uuid4().hex}"
        try:
            await client.ping()
            start = _count()
            async with client.pipeline(transaction=False) as pipe:
                for _ in range(10):
                    pipe.incr(key)
                await pipe.execute()
            await client.expire(key, 60)
            return _count() - start
        finally:
            await client.delete(key)
            await client.aclose()

    assert asyncio.run(scenario()) == 2
