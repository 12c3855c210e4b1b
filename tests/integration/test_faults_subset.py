"""The fault suite's CI subset on a real three-broker cluster: SIGKILL of the busiest partition leader and a Redis
restart, each under open-loop traffic, each held to its targets.

CI keeps the scenarios only this cluster can show (decision 0067): the router's and the agent's SIGKILL under load
run in the parallel part on the test broker (test_router_crash.py: nothing lost; test_agent_crash.py: nothing lost,
nothing run twice), and `make faults` runs them, with every other scenario, at full length on the cluster.

The cluster is this module's own (`LocalInfra(...).up(brokers=3)` under a temp REACH_HOME, free ports), stopped
at teardown; the shared dev broker is never touched. Short phases and 50 req/s (not the suite's 200) keep the
whole module under two minutes on a shared two-core machine (104 s measured with four scenarios); `reach faults run`
runs the full-length suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reach.tooling.faults.runner import Result, run
from reach.tooling.faults.scenarios import select
from reach.tooling.faults.settings import FaultSettings
from reach.tooling.local import LocalInfra

# recovery within its target is a latency figure: run alone after the parallel part (scripts/test.sh), and the
# three JVMs it starts would slow every test beside it
pytestmark = [pytest.mark.integration, pytest.mark.serial]
SUBSET = "leader-sigkill,redis-restart"
SHORT = FaultSettings(rate=50, warmup_s=2, after_s=4, down_s=2, drain_s=60)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalInfra]:
    infra = LocalInfra(tmp_path_factory.mktemp("faults-home"))
    try:
        status = infra.up(brokers=3, timeout=120)
        assert status.brokers == 3 and status.kafka_running
        yield infra
    finally:
        infra.down(grace_s=3)  # a temp home: no clean shutdown to wait for (three at once took 16 s)


@pytest.mark.timeout(420)
def test_the_ci_subset_meets_its_targets(cluster: LocalInfra, tmp_path: Path) -> None:
    results: list[Result] = run(select(SUBSET), infra=cluster, settings=SHORT, workdir=tmp_path, shared=True)
    report = "\n".join(f"{r.scenario.name}: {r.as_dict()}" for r in results)
    assert [r.scenario.name for r in results] == SUBSET.split(","), report
    for r in results:
        f = r.figures
        assert f.acked > 0 and f.acked == f.sent, report  # min.insync.replicas 2 of 3: a dead broker refuses nothing
        assert f.lost == 0, report
        assert f.double_terminal == 0, report
        if not r.scenario.repeats_allowed:
            assert f.double_side_effects == 0, report
        assert f.recovery_s is not None and f.recovery_s <= r.scenario.recovery_target_s, report
        assert r.crashes == (), report  # no router or agent died on its own (the supervisor would hide it)
    assert cluster.status().brokers == 3 and all(n.pid for n in cluster.nodes()), "the killed leader is back"
