"""`reach canary`: the CLI renders reach.ops.canary's rows and passes its refusals on (exit 2 via run_guarded)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from reach.cli import canary as cli
from reach.ops.canary import BadCanary
from reach.records import CanaryState, Control
from tests.unit.control_fixtures import memory_control

runner = CliRunner()
AGENT = "agent://demo/echo"


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    monkeypatch.setenv("REACH_OPERATOR", "ana")  # the CLI records its operator (reach.cli.common.operator_id)
    return memory_control(monkeypatch)


def test_start_status_and_promote_print_the_rows(topic: list[Control]) -> None:
    done = runner.invoke(cli.app, ["start", AGENT, "--version", "2.0.0", "--steps", "10,100", "--step", "2m",
                                   "--json"])
    assert done.exit_code == 0, done.output
    [row] = json.loads(done.output)
    assert (row["state"], row["step"], row["steps"], row["share"], row["step_ms"], row["reason"]) == (
        "RUNNING", 1, [10, 100], 0.1, 120_000, "started by reach-cli:ana")
    shown = runner.invoke(cli.app, ["status"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "2.0.0" in shown.output and "1/2" in shown.output and "10%" in shown.output
    promoted = runner.invoke(cli.app, ["promote", AGENT, "--json"])
    assert promoted.exit_code == 0 and json.loads(promoted.output)[0]["state"] == "PROMOTED"
    assert topic[-1].canary is not None and topic[-1].canary.state is CanaryState.PROMOTED


def test_no_canary_prints_the_hint_and_ending_none_is_refused(topic: list[Control]) -> None:
    shown = runner.invoke(cli.app, ["status"])
    assert shown.exit_code == 0 and "no canary on the control topic" in shown.output
    refused = runner.invoke(cli.app, ["rollback", AGENT])
    assert isinstance(refused.exception, BadCanary) and "has no canary" in str(refused.exception)
    bad = runner.invoke(cli.app, ["start", AGENT, "--version", "2", "--steps", "5,x"])
    assert isinstance(bad.exception, BadCanary) and "--steps '5,x' is not a list" in str(bad.exception)
    assert topic == []
