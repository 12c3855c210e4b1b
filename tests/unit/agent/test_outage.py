"""Backing off from a dependency that failed: doubling waits up to a ceiling, reset by a success."""

from __future__ import annotations

from reach.agent.outage import Outage


def test_backoff_doubles_to_its_ceiling_and_a_success_resets_it() -> None:
    now = [0.0]
    outage = Outage(base_s=1, max_s=3, clock=lambda: now[0])
    assert outage.available() and not outage.down
    outage.failed()
    assert not outage.available() and outage.down
    now[0] = 1.0
    assert outage.available()
    outage.failed()  # 2 s
    now[0] = 2.9
    assert not outage.available()
    now[0] = 3.0
    outage.failed()  # capped at 3 s
    now[0] = 5.9
    assert not outage.available()
    outage.recovered()
    assert outage.available() and not outage.down
