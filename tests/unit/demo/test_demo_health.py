"""The demo's instance table shows each instance's breaker and 1-minute success from GET /agents."""

from __future__ import annotations

import io

from rich.console import Console

from reach.tooling.demo import SICK, _Run
from reach.tooling.demo.dashboard import Dashboard
from reach.tooling.demo.tally import Tally


def test_instance_table_shows_the_breaker() -> None:
    out = io.StringIO()
    dash = Dashboard(Console(file=out, width=200))
    dash.seen_agents([
        {"instance_id": "h-1-sick", "agent_id": SICK[2], "region": "eu-west", "state": "READY", "load": 0.0,
         "breaker": "OPEN", "admit": 0.0, "weight": 1.0, "success_1m": 0.0},
        {"instance_id": "h-2-echo", "agent_id": "agent://demo/echo", "region": "eu-west", "state": "READY",
         "load": 0.1, "breaker": "CLOSED", "admit": 1.0, "weight": 1.0, "success_1m": 1.0},
    ])
    dash.console.print(dash.instance_table(Tally().snapshot()))
    text = out.getvalue()
    assert "breaker" in text and "ok 1m" in text
    assert "OPEN" in text and "CLOSED" in text and "100%" in text and "0%" in text


def test_the_demo_waits_for_the_sick_instance_too() -> None:
    assert (SICK[2], "eu-west") in _Run._expected()
