"""The shown health fields and their rendering, shared by GET /agents, `reach agents` and the demo."""

from __future__ import annotations

from reach.core.healthmodel.fields import SHOWN, breaker, health_fields, share
from reach.records import BreakerState, InstanceHealth


def test_fields_of_a_record_and_of_none() -> None:
    record = InstanceHealth(instance_id="i", agent_id="agent://a/b", at=7, breaker=BreakerState.HALF_OPEN, admit=0.1,
                            success_1m=0.5, p95_ms=12.0, slow_ratio=0.25)
    shown = health_fields(record)
    assert list(shown) == ["health_at", *SHOWN]
    assert (shown["breaker"], shown["admit"], shown["p95_ms"], shown["health_at"]) == ("HALF_OPEN", 0.1, 12.0, 7)
    default = health_fields(None)
    assert (default["breaker"], default["admit"], default["weight"], default["success_1m"]) == ("CLOSED", 1.0, 1.0,
                                                                                                None)
    assert set(default) == set(shown)


def test_rendering() -> None:
    assert breaker({"breaker": "OPEN", "admit": 0.0}) == "[red]OPEN[/]"
    assert breaker({"breaker": "CLOSED", "admit": 0.5, "weight": 1.0}) == "[green]CLOSED[/] 50%"
    assert breaker({"breaker": "CLOSED", "admit": 1.0, "weight": 0.0}) == "[green]CLOSED[/] w0"
    assert breaker({}) == "-"
    assert (share(0.953), share(None)) == ("95%", "-")
