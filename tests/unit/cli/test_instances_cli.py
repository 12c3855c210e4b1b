"""`reach agents` is a group: without a verb it runs the listing with its own options; drain / disable / enable
publish the INSTANCE control record for the given id; `reach policy set` validates before publishing."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from reach import control
from reach.cli import agents, app
from reach.records import Control, InstanceAction


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    sent: list[Control] = []
    monkeypatch.setattr(control, "publish", lambda record, **_kw: sent.append(record))
    return sent


def test_the_listing_still_runs_with_its_options(monkeypatch: pytest.MonkeyPatch, published: list[Control]) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(agents, "agents", lambda **kw: calls.append(kw))
    result = CliRunner().invoke(app, ["agents", "--json", "--timeout", "3", "--capability", "x.a", "--state", "ready",
                                      "--limit", "5", "--offset", "10"])
    assert result.exit_code == 0, result.output
    assert calls == [{"as_json": True, "timeout": 3.0, "capability": "x.a", "agent": None, "state": "ready",
                      "limit": 5, "offset": 10}] and published == []


@pytest.mark.parametrize("action", [InstanceAction.DRAIN, InstanceAction.DISABLE, InstanceAction.ENABLE])
def test_each_verb_publishes_its_instance_record(monkeypatch: pytest.MonkeyPatch, published: list[Control],
                                                 action: InstanceAction) -> None:
    monkeypatch.setattr(agents, "agents", lambda **_kw: pytest.fail("the listing must not run with a verb"))
    result = CliRunner().invoke(app, ["agents", action.value.lower(), "host-1-abc"])
    assert result.exit_code == 0, result.output
    [record] = published
    assert record.key == "INSTANCE:host-1-abc" and record.instance is not None
    assert record.instance.action is action


def test_policy_set_refuses_a_bad_duration_before_publishing(published: list[Control]) -> None:
    result = CliRunner().invoke(app, ["policy", "set", "--budget", "soon"])
    assert result.exit_code != 0 and published == []


def test_the_cli_records_the_operator_on_what_it_publishes(monkeypatch: pytest.MonkeyPatch,
                                                           published: list[Control]) -> None:
    monkeypatch.setenv("REACH_OPERATOR", "ana")
    assert CliRunner().invoke(app, ["agents", "drain", "host-1-abc"]).exit_code == 0
    monkeypatch.delenv("REACH_OPERATOR")
    monkeypatch.setattr("getpass.getuser", lambda: "os-user")
    assert CliRunner().invoke(app, ["agents", "enable", "host-1-abc"]).exit_code == 0
    assert [r.updated_by for r in published] == ["reach-cli:ana", "reach-cli:os-user"]
