"""topics.yaml validation: an invalid file names the line and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach import topics
from reach.errors import ConfigError
from reach.names import Names

ROOT = Path(__file__).resolve().parents[2]
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
