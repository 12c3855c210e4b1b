"""Canaries (`reach canary`, the console's Routing page): start one, list it, end it by hand; what each refuses."""

from __future__ import annotations

import pytest

from reach.errors import InvalidName
from reach.names import Names
from reach.ops import canary as ops
from reach.ops.canary import BadCanary
from reach.records import Canary, CanaryState, Control
from reach.settings import KafkaSettings

NAMES = Names("t")
AGENT = "agent://demo/echo"


def started(version: str = "2.0.0", steps: list[int] | None = None) -> Canary:
    return ops.start(AGENT, version=version, steps=steps or [5, 50, 100], step_ms=60_000, min_success=0.9,
                     by="tester", names=NAMES, kafka=KafkaSettings())


def test_a_started_canary_is_published_and_listed_at_its_first_step(control_topic: list[Control]) -> None:
    canary = started()
    [record] = control_topic
    assert record.key == f"CANARY:{AGENT}" and record.canary == canary and record.updated_by == "tester"
    assert (canary.state, canary.step, canary.reason) == (CanaryState.RUNNING, 0, "started by tester")
    [row] = ops.rows(ops.current(NAMES, kafka=KafkaSettings()))
    assert (row["agent_id"], row["version"], row["state"], row["step"], row["steps"], row["share"]) == (
        AGENT, "2.0.0", "RUNNING", 1, [5, 50, 100], 0.05)
    assert ops.current(NAMES, "agent://demo/other", kafka=KafkaSettings()) == {}


def test_a_second_canary_of_a_running_agent_is_refused(control_topic: list[Control]) -> None:
    started()
    with pytest.raises(BadCanary, match="already runs a canary of 2.0.0"):
        started("3.0.0")
    assert len(control_topic) == 1


@pytest.mark.parametrize(("change", "message"), [
    ({"version": " "}, "--version is empty"),
    ({"min_success": 1.5}, "--min-success 1.5 must be within"),
    ({"steps": [50, 20, 100]}, "--steps '50,20,100' must rise strictly"),
    ({"steps": [5, 50]}, "end at 100"),
    ({"step_ms": 0}, "--step must last more than 0 ms"),
])
def test_bad_arguments_are_refused_before_anything_is_published(control_topic: list[Control], change: dict[str, object],
                                                                message: str) -> None:
    args: dict[str, object] = {"version": "2.0.0", "steps": [5, 100], "step_ms": 1000, "min_success": 0.9, **change}
    with pytest.raises(BadCanary, match=message):
        ops.start(AGENT, by="t", names=NAMES, **args, kafka=KafkaSettings())  # type: ignore[arg-type]
    assert control_topic == []


def test_an_agent_id_that_is_not_one_is_refused(control_topic: list[Control]) -> None:
    with pytest.raises(InvalidName):
        ops.current(NAMES, "search/web", kafka=KafkaSettings())
    with pytest.raises(InvalidName):
        ops.finish("search/web", CanaryState.PROMOTED, by="t", names=NAMES, kafka=KafkaSettings())


def test_promote_ends_a_running_canary_at_its_last_step_and_only_once(control_topic: list[Control]) -> None:
    started()
    done = ops.finish(AGENT, CanaryState.PROMOTED, by="console:root", names=NAMES, kafka=KafkaSettings())
    assert (done.state, done.step, done.reason) == (CanaryState.PROMOTED, 2, "PROMOTED by console:root")
    assert control_topic[-1].canary == done and control_topic[-1].updated_by == "console:root"
    assert ops.row(done)["share"] == 1.0
    with pytest.raises(BadCanary, match="has a PROMOTED canary of 2.0.0, not a RUNNING one"):
        ops.finish(AGENT, CanaryState.ROLLED_BACK, by="t", names=NAMES, kafka=KafkaSettings())


def test_ending_needs_a_running_canary_and_an_end_state(control_topic: list[Control]) -> None:
    with pytest.raises(BadCanary, match="has no canary, not a RUNNING one; start one with `reach canary start`"):
        ops.finish(AGENT, CanaryState.ROLLED_BACK, by="t", names=NAMES, kafka=KafkaSettings())
    started()
    with pytest.raises(BadCanary, match="PROMOTED or ROLLED_BACK"):
        ops.finish(AGENT, CanaryState.RUNNING, by="t", names=NAMES, kafka=KafkaSettings())
    rolled = ops.finish(AGENT, CanaryState.ROLLED_BACK, by="t", names=NAMES, kafka=KafkaSettings())
    assert (rolled.state, rolled.step, ops.row(rolled)["share"]) == (CanaryState.ROLLED_BACK, 0, 0.0)
