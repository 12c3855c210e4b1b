"""examples/sick_agent.py: fail rate and delay from the environment, overridden by REACH_SICK_FILE when it changes."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from examples import sick_agent
from examples.sick_agent import Sickness
from reach.agent import TransientError


def test_defaults_and_environment() -> None:
    assert Sickness({}).current() == (1.0, 0)
    assert Sickness({"REACH_SICK_FAIL_RATE": "0.25", "REACH_SICK_DELAY_MS": "40"}).current() == (0.25, 40)


def test_the_file_overrides_and_is_reread_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "sick.json"
    path.write_text('{"fail_rate": 0.0}')
    sickness = Sickness({"REACH_SICK_FILE": str(path), "REACH_SICK_DELAY_MS": "5"})
    assert sickness.current() == (0.0, 5)
    path.write_text('{"fail_rate": 0.5, "delay_ms": 7}')
    os.utime(path, (1, 1))  # a new mtime even within the filesystem's timestamp granularity
    assert sickness.current() == (0.5, 7)
    path.write_text("not json")
    os.utime(path, (2, 2))
    assert sickness.current() == (0.5, 7)  # a broken file keeps the last values


def test_the_handler_fails_retryably_or_echoes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sick_agent, "sickness", Sickness({"REACH_SICK_FAIL_RATE": "1.0"}))
    with pytest.raises(TransientError) as failed:
        asyncio.run(sick_agent.echo({"n": 1}))
    assert failed.value.code == "SICK"
    monkeypatch.setattr(sick_agent, "sickness", Sickness({"REACH_SICK_FAIL_RATE": "0"}))
    assert asyncio.run(sick_agent.echo({"n": 2})) == {"n": 2}
    assert sick_agent.agent.agent_id == "agent://demo/sick" and "demo.echo" in sick_agent.agent.capabilities
