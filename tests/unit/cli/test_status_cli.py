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
