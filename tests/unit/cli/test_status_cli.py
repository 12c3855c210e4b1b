"""`reach status` and `reach trace`: ids are escaped before they go into the status URLs."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from reach.cli import status as cli


def test_message_and_trace_ids_are_escaped(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    asked: list[str] = []

    def get_json(_base: str, path: str, **_: Any) -> Any:
        asked.append(path)
        if path.startswith("/traces/"):
            return {"message_ids": ["a/b#c"]}
        return {"message_id": "a/b#c", "status": "COMPLETED", "timeline": []}

    monkeypatch.setattr(cli, "get_json", get_json)
    with pytest.raises(typer.Exit):
        cli.status("../agents?x#y", as_json=True)
    cli.trace("t/1?x", as_json=True)
    assert asked == ["/messages/..%2Fagents%3Fx%23y", "/traces/t%2F1%3Fx", "/messages/a%2Fb%23c"]
    assert '"status": "COMPLETED"' in capsys.readouterr().out


def test_a_message_its_fallback_completed_exits_0_and_shows_the_chain(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    row = {"message_id": "m", "capability": "demo.flaky", "status": "DEAD_LETTERED", "timeline": [],
           "fallback": {"capability": "demo.echo", "message_id": "m-fb0", "status": "COMPLETED"}}
    monkeypatch.setattr(cli, "get_json", lambda *_a, **_k: row)
    with pytest.raises(typer.Exit) as done:
        cli.status("m", as_json=False)
    assert done.value.exit_code == 0 and "fallback: demo.echo m-fb0 COMPLETED" in capsys.readouterr().out
    assert cli.final_status({**row, "fallback": {"capability": "demo.echo", "message_id": "m-fb0"}}) == "ACCEPTED"
    unsent = {**row, "fallback": {"capability": "demo.echo", "message_id": None, "note": "gone"}}
    assert cli.final_status(unsent) == "DEAD_LETTERED"
    monkeypatch.setattr(cli, "get_json", lambda *_a, **_k: unsent)
    with pytest.raises(typer.Exit) as failed:
        cli.status("m", as_json=False)
    assert failed.value.exit_code == 1 and "fallback: demo.echo not sent: gone" in capsys.readouterr().out


def test_a_row_with_usage_shows_it_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    row = {"message_id": "m1", "capability": "demo.llm", "status": "COMPLETED", "timeline": [], "usage": {
        "input_tokens": 100, "output_tokens": 50, "model": "demo-small", "cost_micros": 2000, "currency": "USD"}}
    monkeypatch.setattr(cli, "get_json", lambda *_a, **_k: row)
    with pytest.raises(typer.Exit):
        cli.status("m1", as_json=False)
    assert "usage: 100 in + 50 out tokens, demo-small, 0.002 USD" in capsys.readouterr().out


def test_a_fan_out_shows_each_subscribers_delivery_and_a_delivery_its_event(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    row = {"message_id": "e1", "capability": "demo.order.created", "status": "FAILED", "timeline": [], "fanout": {
        "deliveries": [{"agent_id": "agent://demo/audit", "message_id": "e1-s0-demo.audit", "status": "COMPLETED"},
                       {"agent_id": "agent://demo/notify", "message_id": "e1-s0-demo.notify",
                        "status": "DEAD_LETTERED"}]}}
    monkeypatch.setattr(cli, "get_json", lambda *_a, **_k: row)
    with pytest.raises(typer.Exit) as done:
        cli.status("e1", as_json=False)
    out = capsys.readouterr().out
    assert done.value.exit_code == 1 and "fan-out: 1/2 deliveries completed" in out
    assert "agent://demo/notify e1-s0-demo.notify DEAD_LETTERED" in out
    delivery = {"message_id": "e1-s0-demo.audit", "capability": "demo.order.created", "status": "COMPLETED",
                "timeline": [], "fanout": {"deliveries": [], "of": "e1"}}
    monkeypatch.setattr(cli, "get_json", lambda *_a, **_k: delivery)
    with pytest.raises(typer.Exit):
        cli.status("e1-s0-demo.audit", as_json=False)
    assert "delivery of: e1" in capsys.readouterr().out
