"""`reach local up`'s Redis: AOF every second (and in docker/compose.yaml), and the `--redis-cluster N` set-up."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reach.errors import ConfigError
from reach.tooling.local.infra import LocalInfra
from reach.tooling.local.redisnodes import SLOTS, cluster_url, redis_config, slot_ranges

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"


def _conf(text: str) -> dict[str, str]:
    pairs = (line.split(" ", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_the_local_redis_writes_an_aof_every_second_on_loopback(tmp_path: Path) -> None:
    conf = _conf(redis_config(port=6400, data=tmp_path))
    assert conf["appendonly"] == "yes"
    assert conf["appendfsync"] == "everysec"
    assert conf["bind"] == "127.0.0.1" and conf["protected-mode"] == "yes"
    assert conf["port"] == "6400" and conf["dir"] == f'"{tmp_path}"'
    assert conf["save"] == '""'  # no RDB snapshots beside the AOF
    assert "cluster-enabled" not in conf


def test_a_cluster_node_is_cluster_enabled_with_aof(tmp_path: Path) -> None:
    conf = _conf(redis_config(port=7001, data=tmp_path, bus_port=17500))
    assert conf["cluster-enabled"] == "yes" and conf["cluster-config-file"] == "nodes.conf"
    assert conf["cluster-port"] == "17500"
    assert conf["appendonly"] == "yes" and conf["appendfsync"] == "everysec"


@pytest.mark.parametrize("masters", [1, 2, 3, 5, 9])
def test_the_slots_are_split_into_contiguous_ranges_covering_all(masters: int) -> None:
    ranges = slot_ranges(masters)
    assert len(ranges) == masters and ranges[0][0] == 0 and ranges[-1][1] == SLOTS - 1
    assert all(ranges[i][1] + 1 == ranges[i + 1][0] for i in range(masters - 1))
    sizes = [last - first + 1 for first, last in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_the_cluster_url_names_its_first_node_as_the_seed() -> None:
    assert cluster_url([7001, 7002, 7003]) == "redis+cluster://127.0.0.1:7001"


def test_compose_runs_redis_with_aof_every_second() -> None:
    command = yaml.safe_load(COMPOSE.read_text())["services"]["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"


@pytest.mark.parametrize(("state", "masters", "message"), [
    ('{"redis_port": 6379}', 3, "holds a single Redis"),
    ('{"redis_nodes": [{"port": 7001}, {"port": 7002}, {"port": 7003}]}', 0, "holds a 3-master Redis Cluster"),
    ('{"redis_nodes": [{"port": 7001}, {"port": 7002}, {"port": 7003}]}', 5, "holds a 3-master Redis Cluster"),
    ("{}", 10, "expected 1 to 9 masters"),
    ("{}", -1, "expected 1 to 9 masters"),
])
def test_a_home_keeps_its_redis_shape(tmp_path: Path, state: str, masters: int, message: str) -> None:
    (tmp_path / "local.json").write_text(state)
    with pytest.raises(ConfigError, match=message):
        LocalInfra(tmp_path).up(redis_cluster=masters)
