"""A test agent run as a subprocess: counts runs and side effects in Redis, slow on a first run if asked."""

from __future__ import annotations

import os
import time
from typing import Any

import redis

from reach.agent import Agent, Context
from reach.settings import RedisSettings

agent = Agent("agent://test/slow", ttl_ms=int(os.environ.get("SLOW_AGENT_TTL_MS", "3000")), max_concurrency=4,
              lease_margin_ms=1000, drain_grace_s=5, consumer_config={"session.timeout.ms": 6000})
_redis = redis.Redis.from_url(RedisSettings().url())
_ns = os.environ.get("REACH_NAMESPACE", "reach")


@agent.capability("test.slow", version="1.0.0", input_schema={"type": "object"})
def work(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    mid = ctx.envelope.message_id
    runs = _redis.incr(f"{_ns}:test:runs:{mid}")
    _redis.rpush(f"{_ns}:test:started", f"{mid} {ctx.instance_id}")
    if payload.get("slow") and runs == 1:
        time.sleep(float(payload["slow"]))
    _redis.incr(f"{_ns}:test:effects:{mid}")  # the side effect that must not happen twice
    return {"n": payload.get("n"), "by": ctx.instance_id}
