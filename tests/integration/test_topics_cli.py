"""`reach topics plan|apply` reconciles topics.yaml with the real cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka.admin import NewTopic

from reach.kafka import clients
from reach.settings import KafkaSettings


def reach(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def test_apply_then_plan_reports_no_changes(namespace: str, tmp_path: Path) -> None:
    fresh = {"REACH_NAMESPACE": namespace + "x"}
    planned = json.loads(reach("topics", "plan", "--json", env=fresh).stdout)
    assert {c["topic"] for c in planned if c["action"] == "create"} >= {
        f"{namespace}x.receipts", f"{namespace}x.status", f"{namespace}x.registry", f"{namespace}x.dlq"}

    applied = reach("topics", "apply", env=fresh)
    assert applied.returncode == 0, applied.stderr
    again = reach("topics", "apply", "--json", env=fresh)
    assert json.loads(again.stdout) == [], "a second apply changes nothing"
    plan = reach("topics", "plan", env=fresh)
    assert plan.returncode == 0 and plan.stdout.strip() == "No changes"


def test_plan_shows_partition_growth_config_change_and_drift(namespace: str, tmp_path: Path) -> None:
    admin = clients.admin(KafkaSettings())
    for topic in (f"{namespace}.receipts", f"{namespace}.status", f"{namespace}.dlq"):
        admin.delete_topics([topic])[topic].result()
    futures = admin.create_topics([
        NewTopic(f"{namespace}.receipts", 2, 1),                       # fewer than declared: grow
        NewTopic(f"{namespace}.status", 9, 1, config={"cleanup.policy": "compact"}),  # more: drift
        NewTopic(f"{namespace}.dlq", 2, 1, config={"retention.ms": "1000"}),         # config differs
    ])
    for fut in futures.values():
        fut.result()

    changes = {(c["action"], c["topic"]) for c in json.loads(reach("topics", "plan", "--json").stdout)}
    assert ("add_partitions", f"{namespace}.receipts") in changes
    assert ("drift", f"{namespace}.status") in changes
    assert ("alter", f"{namespace}.dlq") in changes

    reach("topics", "apply")
    left = json.loads(reach("topics", "plan", "--json").stdout)
    assert [(c["action"], c["topic"]) for c in left] == [("drift", f"{namespace}.status")]
    meta = admin.list_topics(timeout=10).topics
    assert len(meta[f"{namespace}.receipts"].partitions) == 4


def test_invalid_file_is_refused_before_touching_the_cluster(namespace: str, tmp_path: Path) -> None:
    bad = tmp_path / "topics.yaml"
    bad.write_text(Path(os.environ["REACH_TOPICS_FILE"]).read_text().replace("partitions: 2\n", "partitions: -1\n", 1))
    out = reach("topics", "apply", env={"REACH_TOPICS_FILE": str(bad), "REACH_NAMESPACE": namespace + "bad"})
    assert out.returncode == 2
    assert "line" in out.stderr and "greater than 0" in out.stderr
    topics = clients.admin(KafkaSettings()).list_topics(timeout=10).topics
    assert not any(t.startswith(namespace + "bad.") for t in topics)
