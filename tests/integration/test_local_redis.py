"""The Redis `reach local up` starts, for real: AOF on (a restart keeps what was written), and a three-master
Redis Cluster that `up` brings back on its ports with its data after the nodes were stopped.

Under CI (REACH_CI=1) a missing redis-server fails; elsewhere it skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import redis

from reach.channels import board
from reach.channels.boardread import read_board
from reach.intent.claims import RedisClaims
from reach.redisclient import sync_client
from reach.tooling.local import process, redisnodes


@pytest.fixture(autouse=True)
def _redis_server() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("REACH_CI") == "1":
            pytest.fail("redis-server is missing (apt-get install redis-server; `make setup` does)", pytrace=False)
        pytest.skip("redis-server is missing")


def test_the_local_redis_keeps_its_data_across_a_restart(tmp_path: Path) -> None:
    port = process.free_port()
    pid = redisnodes.start_node(port, tmp_path / "redis")
    try:
        client = redis.Redis(port=port)
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        client.set("reach:result:{m-1}:0", b"receipt", ex=600)
        client.close()
        assert process.stop(pid)
        pid = redisnodes.start_node(port, tmp_path / "redis")
        again = redis.Redis(port=port)
        assert again.get("reach:result:{m-1}:0") == b"receipt", "the AOF brought the register back"
        assert 0 < again.ttl("reach:result:{m-1}:0") <= 600
        again.close()
    finally:
        process.stop(pid)


def test_a_stopped_cluster_comes_back_on_its_ports_with_its_data(tmp_path: Path) -> None:
    nodes = redisnodes.start_cluster([], tmp_path, 3)
    url = redisnodes.cluster_url([n["port"] for n in nodes])
    try:
        client = sync_client(url)
        keys = [f"reach:result:{{m-{i}}}:0" for i in range(30)]
        for key in keys:
            client.set(key, key)
        assert {n["port"] for n in nodes} == {p.port for p in client.get_primaries()}
        client.close()
        for node in nodes:
            assert process.stop(node.pop("pid"))
        nodes = redisnodes.start_cluster(nodes, tmp_path, 3)  # what `reach local up` does on a later call
        again = sync_client(url)
        assert [again.get(k) for k in keys] == [k.encode() for k in keys]
        # the single-key users on the cluster: the channel board (SCAN over every master, MGET per slot) and
        # the handoff desk's move claims
        snaps = [board.Snapshot(channel="webhook", instance_id=f"i-{i}", agent_id="agent://channel/webhook",
                                state="HEALTHY", breaker="CLOSED", success=1.0, p95_ms=5.0, arrival=1.0, reason=None,
                                since=0, at=1) for i in range(12)]
        for snap in snaps:
            again.set(board.key("ns", snap.instance_id), board.encode(snap))
        assert sorted(s.instance_id for s in read_board(again, "ns")) == sorted(s.instance_id for s in snaps)
        claims = RedisClaims(url)
        assert claims.claim("ns:handoff-move:m-1:1:0", "op-a", 60) and not claims.claim("ns:handoff-move:m-1:1:0",
                                                                                         "op-b", 60)
        again.close()
    finally:
        for node in nodes:
            process.stop(node.get("pid"))
