"""topics.yaml validation: an invalid file names the line and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach.errors import ConfigError
from reach.kafka import topics
from reach.names import Names

ROOT = Path(__file__).resolve().parents[3]
GOOD = (ROOT / "topics.yaml").read_text()


def load_text(tmp_path: Path, text: str) -> topics.TopicsFile:
    path = tmp_path / "topics.yaml"
    path.write_text(text)
    return topics.load(path)


def test_the_shipped_file_is_valid() -> None:
    spec = topics.load(ROOT / "topics.yaml")
    resolved = spec.resolved(Names("reach"))
    assert resolved["reach.receipts"].partitions == resolved["reach.status"].partitions
    assert set(spec.retry_tiers()) == {"1s", "10s", "60s"}
    assert spec.family("agent").replication_factor == 1


def test_unknown_key_names_its_line(tmp_path: Path) -> None:
    text = GOOD.replace("  control:", "  control:\n    colour: blue", 1)
    with pytest.raises(ConfigError, match=r"line \d+: topics.control.colour: Extra inputs are not permitted"):
        load_text(tmp_path, text)


def test_bad_value_names_its_line(tmp_path: Path) -> None:
    line = next(i for i, text in enumerate(GOOD.splitlines(), 1) if text.strip().startswith("partitions: 4"))
    text = GOOD.replace("partitions: 4", "partitions: many", 1)
    with pytest.raises(ConfigError, match=rf"line {line}: topics.receipts.partitions"):
        load_text(tmp_path, text)


def test_duplicate_topic_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("  dlq:", "  control:\n    partitions: 1\n  dlq:", 1)
    with pytest.raises(ConfigError, match="duplicate key 'control'"):
        load_text(tmp_path, text)


def test_receipts_and_status_must_match(tmp_path: Path) -> None:
    text = GOOD.replace("  status:              # changelog of the status table, keyed by message_id "
                        "(same partitions as receipts)\n    partitions: 4", "  status:\n    partitions: 3", 1)
    assert text != GOOD
    with pytest.raises(ConfigError, match="receipts and status must have the same partition count"):
        load_text(tmp_path, text)


def test_missing_required_topic(tmp_path: Path) -> None:
    text = GOOD.replace("  dlq:", "  dlq-renamed:", 1)
    with pytest.raises(ConfigError, match="missing required topics: dlq"):
        load_text(tmp_path, text)


def test_the_dlq_fits_the_dead_letter_of_the_largest_capability_record(tmp_path: Path) -> None:
    spec = topics.load(ROOT / "topics.yaml")
    cap = topics.record_bytes(spec.family("cap"))
    assert spec.dead_letter_bytes() >= cap + topics.PROVENANCE_BYTES
    assert spec.dead_letter_bytes() == topics.DEAD_LETTER_BYTES, "the producers' default matches the shipped file"
    assert "replays" in spec.topics and spec.topics["replays"].configs["cleanup.policy"] == "compact"
    small = GOOD.replace('max.message.bytes: "1114112"', 'max.message.bytes: "1048576"')
    with pytest.raises(ConfigError, match="dlq max.message.bytes .* must be at least the cap family's"):
        load_text(tmp_path, small)


def test_replication_follows_the_cluster_size() -> None:
    spec = topics.load(ROOT / "topics.yaml")
    receipts = spec.resolved(Names("reach"))["reach.receipts"]
    one, three = receipts.on_cluster(1), receipts.on_cluster(3)
    assert (one.replication_factor, one.configs.get("min.insync.replicas")) == (1, None)
    assert (three.replication_factor, three.configs["min.insync.replicas"]) == (3, "2")
    assert receipts.on_cluster(5).replication_factor == 3, "the largest environment the cluster reaches"
    assert spec.family("agent").on_cluster(3).replication_factor == 3, "family topics created on demand too"
    assert spec.replication(3) == (3, 2) and spec.replication(1) == (1, None)


def test_an_environment_that_cannot_acknowledge_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace("{brokers: 3, replication_factor: 3, min_insync_replicas: 2}",
                        "{brokers: 3, replication_factor: 3, min_insync_replicas: 4}")
    assert text != GOOD
    with pytest.raises(ConfigError, match=r"line \d+: environments.replicated: .*min_insync_replicas 4 is more"):
        load_text(tmp_path, text)
    with pytest.raises(ConfigError, match="replication_factor 3 needs at least that many brokers"):
        load_text(tmp_path, GOOD.replace("{brokers: 3, replication_factor: 3", "{brokers: 2, replication_factor: 3"))


def test_a_topic_with_its_own_replication_factor_keeps_it() -> None:
    spec = topics.TopicsFile.model_validate({
        **topics.load(ROOT / "topics.yaml").model_dump(exclude={"topics"}),
        "topics": {**topics.load(ROOT / "topics.yaml").model_dump()["topics"],
                   "loads": {"partitions": 1, "replication_factor": 2}},
    })
    assert spec.resolved(Names("x"))["x.loads"].on_cluster(3).replication_factor == 2
