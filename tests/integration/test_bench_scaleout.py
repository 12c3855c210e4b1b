"""`reach bench --modes scaleout`'s churn step: a route process added and one removed (SIGTERM) under open-loop load,
every process started through the `reach` CLI; every message ends, with one terminal status, and the ledger agent's
handler ran once per message and generation. A receipt repeated identically (at least once) is allowed, as is OVERLOAD
on a starved machine. Tiny counts; nothing here asserts on a timing or a CPU figure (docs/performance.md has the
measured table)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reach.tooling.bench import scaleout
from tests.integration.conftest import Infra

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.mark.timeout(420)
def test_adding_and_removing_a_router_under_load_loses_nothing_and_repeats_no_side_effect(
        infra: Infra, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_BOOTSTRAP", infra.bootstrap)
    monkeypatch.setenv("REACH_REDIS_URL", infra.redis_url)
    config = scaleout.ScaleoutConfig(rate=30.0, seconds=3.0, routers=(), churn_seconds=12.0, drain_timeout=90.0)

    (row,) = scaleout.run(config, topics_file=ROOT / "topics.yaml")

    assert row.mode == "scaleout churn 30/s"
    assert row.messages == 360
    assert row.lost == 0, row.notes
    assert row.figures["double_terminal"] == 0, row.notes  # one terminal per message and generation
    assert row.figures["double_side_effects"] == 0, row.notes
    assert row.figures["route_processes"] == 3.0  # two at the start, one added, one of the first two removed
