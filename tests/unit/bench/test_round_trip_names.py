"""Round-trip set-ups and row names: what the table and the JSON call each run."""

from __future__ import annotations

import pytest

from reach.tooling.bench import round_trip
from reach.tooling.bench.round_trip import ECHO, NOOP, ROLES_SPLIT, Setup, mode_name


def test_row_names_say_the_set_up_and_the_process_split() -> None:
    assert mode_name(NOOP, 200.0) == "round trip 200/s"
    assert mode_name(ECHO, 100.0) == "round trip echo x2 100/s"
    assert mode_name(NOOP, 200.0, ROLES_SPLIT) == "round trip split 200/s"


def test_the_echo_set_up_runs_the_example_from_the_source_checkout() -> None:
    assert ECHO.instances == 2 and ECHO.missing() is None
    gone = Setup("gone", "x.y", "agent://x/y", "examples.no_such_agent:agent", path=ECHO.path)
    assert "not beside the installed package" in (gone.missing() or "")
    assert set(round_trip.SETUPS) == {"noop", "echo x2", "noop x2", "noop split", "noop redis-cluster"}
    assert round_trip.SETUPS["noop x2"].instances == 2
    assert round_trip.SETUPS["noop split"].roles == round_trip.ROLES_SPLIT


def test_the_redis_cluster_set_up_starts_three_masters_and_says_when_it_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cluster = round_trip.SETUPS["noop redis-cluster"]
    assert cluster.redis_masters == 3 and cluster.roles == round_trip.ROLES_ALL and NOOP.redis_masters == 0
    monkeypatch.setattr(round_trip.shutil, "which", lambda _name: None)
    assert "redis-server is missing" in (cluster.missing() or "")
    assert NOOP.missing() is None
