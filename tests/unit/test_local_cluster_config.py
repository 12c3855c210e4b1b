"""`reach local up --brokers N`: the node configs a cluster is started with, and the set-ups it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach.errors import ConfigError
from reach.tooling.local.infra import LocalInfra, _cluster_properties


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_three_node_cluster_replicates_its_internal_topics_and_knows_every_voter(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:9101,2@127.0.0.1:9102,3@127.0.0.1:9103"
    props = _props(_cluster_properties(tmp_path, node_id=2, port=9002, controller_port=9102, voters=voters,
                                       brokers=3))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9002,CONTROLLER://127.0.0.1:9102"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9002"
    assert props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert int(props["replica.lag.time.max.ms"]) < 15_000, "the broker-pause fault outlasts it"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"brokers": 0}, "expected 1 to 5"),
    ({"brokers": 3, "sasl": True}, "--sasl runs on the single broker only"),
])
def test_refused_set_ups_say_what_to_do(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        LocalInfra(tmp_path).up(**kwargs)  # type: ignore[arg-type]


def test_a_home_keeps_its_cluster_size(tmp_path: Path) -> None:
    (tmp_path / "local.json").write_text('{"kafka_port": 9092}')
    with pytest.raises(ConfigError, match="holds a 1-broker setup, not 3"):
        LocalInfra(tmp_path).up(brokers=3)
