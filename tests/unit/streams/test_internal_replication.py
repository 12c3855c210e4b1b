"""faust's own topics get the replication the topics file gives for the cluster's size."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from reach.kafka import topics
from reach.settings import KafkaSettings
from reach.streams import app

SPEC = topics.load(Path(__file__).resolve().parents[3] / "topics.yaml")


class Admin:
    def __init__(self, brokers: int | None) -> None:
        self.brokers = brokers

    def list_topics(self, timeout: float) -> Any:
        if self.brokers is None:
            raise RuntimeError("no broker answers")
        return SimpleNamespace(brokers={i: object() for i in range(self.brokers)})


@pytest.mark.parametrize(("brokers", "expected"), [(1, 1), (3, 3), (None, 1)])
def test_internal_topics_follow_the_cluster_size(monkeypatch: pytest.MonkeyPatch, brokers: int | None,
                                                 expected: int) -> None:
    monkeypatch.setattr(app.clients, "admin", lambda _kafka: Admin(brokers))
    assert app._internal_replication(SPEC, KafkaSettings()) == expected
