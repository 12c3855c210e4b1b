"""`reach policy`: set prints what it published from reach.ops.policy's result; show renders its reports."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from reach.cli import policy as cli
from reach.records import Control
from tests.unit.control_fixtures import memory_control

runner = CliRunner()


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    monkeypatch.setattr(cli, "_tiers", lambda: ["5s", "30s"])
    return memory_control(monkeypatch)


def test_set_prints_the_fields_it_changed_and_show_their_source(topic: list[Control]) -> None:
    done = runner.invoke(cli.app, ["set", "--capability", "demo.echo", "--budget", "2m", "--max-attempts", "4"])
    assert done.exit_code == 0, done.output
    assert "policy for demo.echo published (key POLICY:demo.echo): budget_ms=" in done.output
    assert "max_attempts=4" in done.output and done.output.index("budget_ms") < done.output.index("max_attempts")
    [record] = topic
    assert record.policy is not None and (record.policy.budget_ms, record.policy.max_attempts) == (120_000, 4)
    shown = runner.invoke(cli.app, ["show", "--json"])
    assert shown.exit_code == 0
    reports = json.loads(shown.output)
    assert [r["scope"] for r in reports] == ["*", "demo.echo"]
    assert reports[1]["fields"]["budget_ms"] == {**reports[1]["fields"]["budget_ms"], "value": 120_000,
                                                 "from": "demo.echo"}


def test_set_without_a_field_is_a_usage_error(topic: list[Control]) -> None:
    done = runner.invoke(cli.app, ["set"])
    assert done.exit_code == 2 and "give at least one field to set" in done.output and topic == []


def test_an_absurd_execution_timeout_cap_is_a_usage_error_and_publishes_nothing(topic: list[Control]) -> None:
    from reach.cli.common import exit_code_for
    from reach.core.timeouts import BadTimeout

    done = runner.invoke(cli.app, ["set", "--capability", "demo.slow", "--execution-timeout", "5h"])
    assert isinstance(done.exception, BadTimeout) and exit_code_for(done.exception) == 2
    assert "--execution-timeout must be a whole number of milliseconds from 1 to 3,600,000" in str(done.exception)
    assert topic == []


def test_a_looping_fallback_is_a_usage_error_and_publishes_nothing(topic: list[Control],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.cli.common import exit_code_for
    from reach.errors import ConfigError

    monkeypatch.setattr(cli.ops_policy, "known_capabilities", lambda **_kw: {"demo.a", "demo.b"})
    done = runner.invoke(cli.app, ["set", "--capability", "demo.a", "--fallback", "demo.b"])
    assert done.exit_code == 0 and "fallback=demo.b" in done.output
    looped = runner.invoke(cli.app, ["set", "--capability", "demo.b", "--fallback", "demo.a"])
    assert isinstance(looped.exception, ConfigError) and exit_code_for(looped.exception) == 2
    assert "the fallbacks loop: demo.b -> demo.a -> demo.b" in str(looped.exception)
    unknown = runner.invoke(cli.app, ["set", "--capability", "demo.b", "--fallback", "demo.zz"])
    assert isinstance(unknown.exception, ConfigError) and exit_code_for(unknown.exception) == 2
    assert len(topic) == 1
    cleared = runner.invoke(cli.app, ["set", "--capability", "demo.a", "--fallback", "none"])
    assert cleared.exit_code == 0 and "fallback=-" in cleared.output
