"""The scenario list and the verdict: names as the issue gives them, targets per kind of fault."""

from __future__ import annotations

import pytest

from reach.errors import ConfigError
from reach.tooling.faults.checker import Figures, Seen, Sent, Window, check
from reach.tooling.faults.runner import verdict
from reach.tooling.faults.scenarios import BY_NAME, SCENARIOS, Poison, select


def test_only_selects_in_suite_order_and_refuses_unknown_names() -> None:
    assert [s.name for s in select("redis-restart,router-sigkill")] == ["router-sigkill", "redis-restart"]
    assert len(select(None)) == len(SCENARIOS)
    with pytest.raises(ConfigError, match="unknown scenario"):
        select("router-sigkill,meteor")


def _figures(double_effects: int, completed_at: int) -> Figures:
    sent = [Sent("a", 1_000, True), Sent("b", 20_000, True)]
    receipts = [Seen("a", 0, "COMPLETED", 1_500), Seen("b", 0, "COMPLETED", completed_at)]
    ledger = [("a", 0)] * (1 + double_effects) + [("b", 0)]
    return check(sent, receipts, ledger, Window(10_000, 12_000))


def test_a_repeated_side_effect_outside_the_agent_or_beyond_the_handlers_in_flight_misses() -> None:
    figures = _figures(double_effects=1, completed_at=20_100)
    assert verdict(BY_NAME["router-sigkill"], figures) == ("1 double side effects",)
    assert verdict(BY_NAME["agent-sigkill"], figures) == ("1 double side effects > 0 in flight",)
    assert verdict(BY_NAME["redis-flush"], figures) == (), "measured and explained, not a target"


def test_slow_recovery_misses_the_kind_s_target() -> None:
    figures = _figures(double_effects=0, completed_at=62_000)  # 50 s after the fault ended
    assert verdict(BY_NAME["router-sigkill"], figures) == ("recovery 50.0s > 30s",)
    assert verdict(BY_NAME["leader-sigkill"], figures) == ()


def test_poison_is_mixed_in_only_while_the_fault_is_on() -> None:
    poison = Poison(control_topic="ns.control")
    assert poison(0) is None
    poison.on.set()
    junk, sneaky = poison(10), poison(20)
    assert poison(21) is None
    assert junk is not None and junk[0].startswith("poison-junk-")
    assert sneaky is not None and sneaky[1] != junk[1]


def test_the_sick_downstream_runs_long_enough_after_its_fault_for_a_breaker_to_probe(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.tooling.faults.settings import FaultSettings

    short = FaultSettings(after_s=10)
    assert BY_NAME["sick-downstream"].after_s(short) == 60.0  # 30 s open breaker + 30 s for the probes
    assert BY_NAME["router-sigkill"].after_s(short) == 10.0
    assert BY_NAME["sick-downstream"].after_s(FaultSettings(after_s=90)) == 90.0  # a longer setting stands
    monkeypatch.setenv("REACH_HEALTH_OPEN_MS", "5000")
    assert BY_NAME["sick-downstream"].after_s(short) == 35.0
