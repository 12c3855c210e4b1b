"""An operator ending a canary (console or CLI): promoted jumps to the last step, rolled back stays where it was."""

from __future__ import annotations

import pytest

from reach.console.backend import ConsoleBackend
from reach.core.canarybook import ended
from reach.names import Names
from reach.ops.canary import BadCanary
from reach.records import Canary, CanaryState
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.canary.controller import canary_record
from tests.unit.control_fixtures import memory_control


def test_ending_a_canary_records_who_and_when() -> None:
    running = Canary(agent_id="agent://a", version="2", step=1, started_at=1, step_started_at=2)
    promoted = ended(running, CanaryState.PROMOTED, by="console:root", now_ms=9)
    assert (promoted.state, promoted.step, promoted.step_started_at) == (CanaryState.PROMOTED, 3, 9)
    assert promoted.reason == "PROMOTED by console:root"
    rolled = ended(running, CanaryState.ROLLED_BACK, by="reach-cli", now_ms=9)
    assert (rolled.state, rolled.step, rolled.reason) == (CanaryState.ROLLED_BACK, 1, "ROLLED_BACK by reach-cli")


def test_the_console_lists_and_ends_canaries_with_the_clis_use_case(monkeypatch: pytest.MonkeyPatch) -> None:
    published = memory_control(monkeypatch)
    backend = ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings())
    with pytest.raises(BadCanary, match="has no canary, not a RUNNING one"):
        backend.finish_canary("agent://a/b", CanaryState.ROLLED_BACK, "console:root")
    running = Canary(agent_id="agent://a/b", version="2", steps=[10, 100], started_at=1, step_started_at=1)
    published.append(canary_record(running, by="reach-cli"))
    [row] = backend.canaries()
    assert (row["agent_id"], row["state"], row["step"], row["share"]) == ("agent://a/b", "RUNNING", 1, 0.1)
    backend.finish_canary("agent://a/b", CanaryState.ROLLED_BACK, "console:root")
    assert published[-1].canary is not None and published[-1].canary.state is CanaryState.ROLLED_BACK
    assert published[-1].updated_by == "console:root" and backend.canaries()[0]["state"] == "ROLLED_BACK"


def test_the_console_starts_a_canary_for_a_registered_agent_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.core.views.registryview import RegistryView
    from reach.errors import ConfigError
    from reach.records import AgentRegistration, AgentState

    published = memory_control(monkeypatch)
    registry = RegistryView()
    registry.apply("i-1", AgentRegistration(agent_id="agent://a/b", instance_id="i-1", build_version="1.0",
                                            state=AgentState.READY, heartbeat_at=1, ttl_ms=10_000, inbox_topic="t.x"))
    monkeypatch.setattr("reach.console.backend.read_registry", lambda *_a, **_kw: registry)
    backend = ConsoleBackend(names=Names("t"), kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings())
    with pytest.raises(ConfigError, match="has no registered instance"):
        backend.start_canary("agent://a/typo", version="2", steps=[10, 100], step_ms=1_000, min_success=0.9,
                             by="console:root")
    with pytest.raises(BadCanary, match="min-success 1.5"):
        backend.start_canary("agent://a/b", version="2", steps=[10, 100], step_ms=1_000, min_success=1.5,
                             by="console:root")
    assert published == []
    row = backend.start_canary("agent://a/b", version="2", steps=[10, 100], step_ms=1_000, min_success=0.9,
                               by="console:root")
    assert (row["state"], row["share"], published[-1].updated_by) == ("RUNNING", 0.1, "console:root")
    with pytest.raises(BadCanary, match="already runs a canary"):
        backend.start_canary("agent://a/b", version="3", steps=[100], step_ms=1_000, min_success=0.9, by="x")
