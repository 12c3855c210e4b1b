"""The soak's churn schedule: the router once before the last half, a drain and a canary in the middle, the
churned agent every two minutes, nothing in the last 15 s but the canary's end."""

from __future__ import annotations

from reach.tooling.soak.plan import Action, canary_s, schedule


def test_a_three_minute_run_has_every_churn_step() -> None:
    plan = [(e.at_s, e.action) for e in schedule(180)]
    assert plan == [(45.0, Action.RESTART_ROUTER), (72.0, Action.DRAIN_AGENT), (81.0, Action.CANARY_START),
                    (101.0, Action.CANARY_END), (120.0, Action.RESTART_AGENT)]


def test_an_hour_restarts_the_agent_every_two_minutes_and_the_router_once() -> None:
    plan = schedule(3600)
    restarts = [e.at_s for e in plan if e.action is Action.RESTART_AGENT]
    assert restarts == [120.0 * k for k in range(1, 30)]  # 3600 itself is the end of the traffic
    assert [e.at_s for e in plan if e.action is Action.RESTART_ROUTER] == [900.0]  # before the last half
    assert [e.at_s for e in plan] == sorted(e.at_s for e in plan)
    start = next(e.at_s for e in plan if e.action is Action.CANARY_START)
    end = next(e.at_s for e in plan if e.action is Action.CANARY_END)
    assert end - start == canary_s(3600) == 60.0


def test_the_canary_lasts_a_tenth_of_the_run_within_20_to_60_s() -> None:
    assert (canary_s(60), canary_s(300), canary_s(7200)) == (20.0, 30.0, 60.0)
