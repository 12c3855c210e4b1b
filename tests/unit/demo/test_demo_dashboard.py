"""What the demo prints: the live view, the log line and the summary, from a tally."""

from __future__ import annotations

import io

from rich.console import Console

from reach.records import Receipt, Status
from reach.tooling.demo.dashboard import Dashboard, Frame, ms, short_instance
from reach.tooling.demo.tally import Sent, Tally


def test_ms_and_short_instance() -> None:
    assert ms(None) == "-" and ms(14) == "14 ms" and ms(1250) == "1.25 s"
    assert short_instance("my-host-1234-01abcdef") == "1234-01abcdef"
    assert short_instance("plain") == "plain"


def test_summary_states_the_totals_and_how_to_look_deeper() -> None:
    tally = Tally()
    tally.sent("m1", Sent("echo", created_at=0, expect="COMPLETED"))
    tally.add(Receipt(message_id="m1", trace_id="t", tenant="d", capability="demo.echo", instance_id="h-1-x",
                      status=Status.COMPLETED, at=12))
    out = io.StringIO()
    dash = Dashboard(Console(file=out, width=160))
    dash.seen_agents([{"instance_id": "h-1-x", "agent_id": "agent://demo/echo", "region": "eu-west",
                       "state": "READY", "load": 0.25}])
    frame = Frame(namespace="demo-x", elapsed=3.0, duration=20.0, rate=25.0, routed_per_s=1.0, phase="traffic")
    assert "completed=1" in dash.compact(tally.snapshot(), frame)
    dash.console.print(dash.live(tally.snapshot(), frame))
    dash.summary(tally.snapshot(), namespace="demo-x", traffic_s=20.0, rate=25.0,
                 commands=["reach dlq ls"], log_dir="/tmp/logs")
    text = out.getvalue()
    assert "eu-west" in text and "25%" in text
    assert "completed 1" in text and "1/1 ended as their kind expects" in text
    assert "p50 12 ms" in text and "reach dlq ls" in text


def test_the_summary_says_which_requests_their_fallback_served() -> None:
    tally = Tally()
    tally.sent("m1", Sent("legacy, served by its fallback (echo)", created_at=0, expect="COMPLETED",
                          fallback="demo.echo"))
    for message_id, capability, status in (("m1", "demo.legacy", Status.UNROUTABLE),
                                           ("m1-fb0", "demo.echo", Status.COMPLETED)):
        tally.add(Receipt(message_id=message_id, trace_id="t", tenant="d", capability=capability, status=status,
                          at=12))
    out = io.StringIO()
    Dashboard(Console(file=out, width=200)).summary(tally.snapshot(), namespace="demo-x", traffic_s=20.0, rate=25.0,
                                                    commands=[], log_dir="/tmp/logs")
    text = out.getvalue()
    assert ("fallback: 1 requests handed on to their POLICY fallback demo.echo (UNROUTABLE 1), served by demo.echo: "
            "COMPLETED 1") in text
    assert "1/1 ended as their kind expects" in text
