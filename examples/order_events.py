"""What the order-event subscribers (examples/audit_agent.py, examples/notify_agent.py) share: the event's schema,
their settings, and how each records what it saw in Redis, so tests and `reach demo` can count it."""

from __future__ import annotations

from typing import Any

from reach.agent.agent import Context
from reach.redisclient import AsyncRedis, async_client
from reach.settings import ReachSettings, RedisSettings

CAPABILITY = "demo.order.created"
ORDER_SCHEMA: dict[str, Any] = {"type": "object",
                                "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}}
EXAMPLE = {"order_id": "o-1", "amount": 42}
SUBSCRIBER: dict[str, Any] = {"max_concurrency": 16, "max_queue": 2_000, "execution_timeout_ms": 10_000}
"""A subscriber queues its events rather than shedding them (a deep queue), and runs each briefly."""
_redis: list[AsyncRedis] = []


async def remember(name: str, ctx: Context, instance_id: str) -> str:
    """Add the event to the set `<ns>:<name>:events` (by the event's id: a delivery run again adds nothing) and count
    the run in the hash `<ns>:<name>:runs` under this instance; returns the event's id."""
    if not _redis:
        _redis.append(async_client(RedisSettings().url()))
    redis, prefix = _redis[0], f"{ReachSettings().namespace}:{name}"
    event = ctx.envelope.parent_id or ctx.envelope.message_id  # a delivery's parent is the event
    await redis.sadd(f"{prefix}:events", event)
    await redis.hincrby(f"{prefix}:runs", instance_id, 1)
    await redis.expire(f"{prefix}:events", 86_400)
    await redis.expire(f"{prefix}:runs", 86_400)
    return event
