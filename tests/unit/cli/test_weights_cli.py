"""`reach weights`: its options and rows come from the factor list; set publishes the map and the fixed fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from reach.cli import weights as cli
from reach.control import weights_record
from reach.core.factors import FACTORS, NAMES
from reach.core.views.controlview import ControlView
from reach.ops.weights import BadWeights
from reach.records import Control, Weights

runner = CliRunner()


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> list[Control]:
    """The control topic in memory: what `set` publishes, `show` and the next `set` read back."""
    published: list[Control] = []

    def read_control(**_kw: Any) -> ControlView:
        view = ControlView()
        for record in published:
            view.apply(record.key, record)
        return view

    monkeypatch.setattr(cli.control, "read_control", read_control)
    monkeypatch.setattr(cli.control, "publish", lambda record, **_kw: published.append(record))
    return published


def test_set_has_one_option_per_factor() -> None:
    text = runner.invoke(cli.app, ["set", "--help"], env={"COLUMNS": "200"}).output
    for factor in FACTORS:
        assert f"--{factor.name}" in text and factor.meaning[:30] in text
    assert "priority-health" in text


def test_set_publishes_the_map_and_the_fixed_fields(topic: list[Control]) -> None:
    done = runner.invoke(cli.app, ["set", "--capability", "a.b", "--preset", "priority-health", "--cost", "0.1",
                                   "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output) == {"scope": "a.b", "fit": 0.0, "locality": 0.1, "load": 0.2, "affinity": 0.0,
                                       "health": 0.3, "priority": 0.4, "cost": 0.1}
    [record] = topic
    assert record.key == "WEIGHTS:a.b" and record.weights is not None
    assert record.weights.factors == {"fit": 0.0, "locality": 0.1, "load": 0.2, "affinity": 0.0, "health": 0.3,
                                      "priority": 0.4, "cost": 0.1}
    assert (record.weights.load, record.weights.locality, record.weights.fit) == (0.2, 0.1, 0.0)
    again = runner.invoke(cli.app, ["set", "--capability", "a.b", "--load", "0.5"])  # keeps what is in effect
    assert again.exit_code == 0 and topic[-1].weights is not None and topic[-1].weights.factors["priority"] == 0.4


def test_set_keeps_factors_this_version_does_not_know(topic: list[Control]) -> None:
    topic.append(weights_record(Weights(factors={"future": 0.7}), scope="*", by="newer"))
    assert runner.invoke(cli.app, ["set", "--cost", "0.2"]).exit_code == 0
    assert topic[-1].weights is not None and topic[-1].weights.factors["future"] == 0.7


def test_show_lists_every_factor_with_where_it_came_from(topic: list[Control]) -> None:
    topic.append(weights_record(Weights(factors={"cost": 0.5}), scope="a.b", by="ops"))  # not every factor
    shown = json.loads(runner.invoke(cli.app, ["show", "--capability", "a.b", "--json"]).output)["a.b"]
    assert shown["from_scope"] == "a.b" and shown["cost"] == 0.5 and shown["updated_by"] == "ops"
    assert shown["from"]["cost"] == shown["from"]["fit"] == "a.b" and shown["from"]["health"] == "default"
    assert runner.invoke(cli.app, ["set", "--capability", "a.b", "--health", "0.1"]).exit_code == 0
    rewritten = json.loads(runner.invoke(cli.app, ["show", "--capability", "a.b", "--json"]).output)["a.b"]
    assert set(rewritten["from"].values()) == {"a.b"}, "set writes every factor into the scope's record"
    other = json.loads(runner.invoke(cli.app, ["show", "--capability", "c.d", "--json"]).output)["c.d"]
    assert other["from_scope"] == "*" and set(other["from"].values()) == {"default"}
    table = runner.invoke(cli.app, ["show"], env={"COLUMNS": "200"}).output
    assert all(name in table for name in NAMES) and "a.b" in table and "default" in table


@pytest.mark.parametrize("args", [["--fit", "-1"], ["--cost", "nan"], ["--preset", "nope"],
                                  ["--preset", "default", "--fit", "0", "--locality", "0", "--load", "0",
                                   "--affinity", "0"]])
def test_bad_weights_are_refused_with_exit_2(topic: list[Control], args: list[str]) -> None:
    from reach.cli.common import exit_code_for

    done = runner.invoke(cli.app, ["set", *args])
    assert isinstance(done.exception, BadWeights) and exit_code_for(done.exception) == 2 and topic == []
