"""Every Lua script's KEYS share one Redis Cluster slot (hash tags), and the URL alone picks a cluster client."""

from __future__ import annotations

import uuid

import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from reach.agent.idempotency import KeyScope, Leases
from reach.gateway.quotas import RedisQuotas
from reach.redisclient import async_client, by_slot, is_cluster, node_url, slot_of, sync_client, tag
from reach.terminals import result_key

IDS = ["0998f8cd-5e88-4e60-96d0-dfcaf41c1665", "m", "a{b}c", "}{", "", "x" * 300, "ünïcode-ид"]
SCOPES = [None, KeyScope(tenant="t", capability="demo.echo", key="order-1"),
          KeyScope(tenant="", capability="c", key="{weird}")]


def _one_slot(keys: list[str]) -> bool:
    return len({slot_of(k) for k in keys}) == 1


@pytest.mark.parametrize("message_id", IDS)
@pytest.mark.parametrize("scope", SCOPES)
def test_every_agent_script_call_stays_on_one_slot(message_id: str, scope: KeyScope | None) -> None:
    leases = Leases(redis.asyncio.Redis(), namespace="reach", owner="i-1", result_ttl_s=60)
    calls = leases.script_keys(message_id, 3, 2, scope)
    assert len(calls) == (5 if scope is not None else 4)
    for keys in calls:
        assert _one_slot(keys), keys
    # the register the router and the timekeeper claim is the agent's result key, on the message's slot
    assert leases.result_key(message_id, 3) == result_key("reach", message_id, 3)
    assert slot_of(result_key("reach", message_id, 3)) == slot_of(leases.lease_key(message_id, 3))


def test_distinct_messages_spread_over_the_slots() -> None:
    slots = {slot_of(result_key("reach", str(uuid.uuid4()), 0)) for _ in range(200)}
    assert len(slots) > 150  # one hash tag per message, not one for all


@pytest.mark.parametrize(("app_id", "capability"), [("app-1", "demo.echo"), ("x", "a.b.c"), ("{a}", "}c{")])
def test_a_quota_take_keeps_both_buckets_on_one_slot(app_id: str, capability: str) -> None:
    quotas = RedisQuotas(client=redis.asyncio.Redis(), namespace="reach")
    assert _one_slot(quotas.take_keys(app_id, capability))
    assert _one_slot(quotas.read_keys(app_id))
    other = RedisQuotas(client=redis.asyncio.Redis(), namespace="other")
    assert other.take_keys(app_id, capability)[0] != quotas.take_keys(app_id, capability)[0]


def test_a_terminal_batch_splits_by_slot_in_order() -> None:
    keys = [result_key("ns", f"m{i}", 0) for i in range(50)]
    groups = by_slot(keys)
    assert sorted(i for g in groups.values() for i in g) == list(range(50))
    for slot, group in groups.items():
        assert all(slot_of(keys[i]) == slot for i in group)


def test_tag_escapes_braces_and_keeps_values_apart() -> None:
    assert tag("abc") == "{abc}"
    assert tag("a}b{") == "{a%7Db%7B}"
    assert tag("") == "{%}"
    values = ["", "%", "{", "}", "%7B", "a{b", "a(b", "}{", "{}{", "%25"]
    assert len({tag(v) for v in values}) == len(values)
    assert slot_of("x:" + tag("a}b") + ":1") == slot_of("y:" + tag("a}b") + ":2")


def test_the_url_scheme_picks_the_cluster_client() -> None:
    assert is_cluster("redis+cluster://127.0.0.1:7000") and is_cluster("rediss+cluster://h:1")
    assert not is_cluster("redis://127.0.0.1:6379/0")
    assert node_url("redis+cluster://u:p@h:7000/0?protocol=3") == "redis://u:p@h:7000?protocol=3"
    assert node_url("rediss+cluster://h:7000") == "rediss://h:7000"
    assert isinstance(sync_client("redis://127.0.0.1:1/0"), redis.Redis)
    assert isinstance(async_client("redis://127.0.0.1:1/0"), redis.asyncio.Redis)


def test_a_cluster_url_builds_a_cluster_client_or_says_it_cannot_reach_it() -> None:
    # the sync cluster client asks a seed for the slot map at construction: nothing listens on port 1
    with pytest.raises(redis.exceptions.RedisClusterException):
        sync_client("redis+cluster://127.0.0.1:1", socket_connect_timeout=0.2)
    assert isinstance(async_client("redis+cluster://127.0.0.1:1"), redis.asyncio.cluster.RedisCluster)
