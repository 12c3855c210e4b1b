"""The canary promotion rule, its per-step tally, and the controller's decisions between reads."""

from __future__ import annotations

import pytest

from reach.cli.canary import BadCanary, parse_duration_ms, parse_steps
from reach.core.canarybook import ArmTally, CanaryBook, Gate, Verdict, advance, canaries, judge
from reach.kafka.codec import encode
from reach.names import Names
from reach.records import CanaryState, Control, Receipt, Status
from reach.settings import CanarySettings
from reach.streams.canary.controller import CanaryDriver, canary_record
from tests.unit.routing_fixtures import canary, reg

AGENT = "agent://echo/main"
STEP = 10_000


def tally(calls: int, ok: int) -> ArmTally:
    return ArmTally(calls=calls, successes=ok)


def test_promote_after_the_step_when_success_holds() -> None:
    c = canary(step_ms=STEP)
    assert judge(c, tally(20, 19), STEP - 1) is Verdict.HOLD, "not before the step is over"
    assert judge(c, tally(20, 19), STEP) is Verdict.PROMOTE


def test_rollback_as_soon_as_success_is_below_the_threshold() -> None:
    assert judge(canary(step_ms=STEP), tally(20, 18), 1) is Verdict.ROLLBACK


def test_hold_while_a_step_has_too_few_calls() -> None:
    c = canary(step_ms=STEP)
    assert judge(c, tally(3, 0), 10 * STEP, gate=Gate(min_calls=10)) is Verdict.HOLD
    assert judge(c, tally(0, 0), 10 * STEP, gate=Gate(min_calls=0)) is Verdict.HOLD, "never judged on nothing"


def test_only_a_running_canary_is_judged() -> None:
    for state in (CanaryState.PROMOTED, CanaryState.ROLLED_BACK, CanaryState.UNKNOWN):
        assert judge(canary(state=state), tally(100, 0), 10 * STEP) is Verdict.HOLD


def test_advance_walks_the_steps_then_promotes() -> None:
    c = canary(steps=[5, 50, 100], step_ms=STEP)
    c = advance(c, Verdict.PROMOTE, tally(10, 10), STEP)
    assert (c.step, c.state, c.step_started_at) == (1, CanaryState.RUNNING, STEP)
    c = advance(advance(c, Verdict.PROMOTE, tally(10, 10), 2 * STEP), Verdict.PROMOTE, tally(10, 10), 3 * STEP)
    assert c.state is CanaryState.PROMOTED and "promoted" in (c.reason or "")
    back = advance(canary(), Verdict.ROLLBACK, tally(10, 2), 5)
    assert back.state is CanaryState.ROLLED_BACK and "2/10 ok" in (back.reason or "")


def receipt(instance_id: str, status: Status, at: int = 100) -> Receipt:
    return Receipt(message_id=f"m-{at}", trace_id="t", tenant="default", capability="text.echo",
                   agent_id=AGENT, instance_id=instance_id, status=status, at=at)


def book_with_canary(**kw: object) -> CanaryBook:
    book = CanaryBook()
    book.registration("old", reg("old", build_version="1.0.0"))
    book.registration("new", reg("new", build_version="2.0.0"))
    book.canary(AGENT, canary("2.0.0", **kw))  # type: ignore[arg-type]
    return book


def test_the_book_counts_only_the_canary_arm_within_the_step() -> None:
    book = book_with_canary(started_at=50)
    for status in (Status.COMPLETED, Status.COMPLETED, Status.ATTEMPT_FAILED, Status.FAILED, Status.STARTED):
        book.receipt(receipt("new", status))
    book.receipt(receipt("old", Status.FAILED))
    book.receipt(receipt("new", Status.FAILED, at=10))  # before this step began
    assert book.tallies[AGENT] == ArmTally(calls=4, successes=2)


def test_a_new_step_starts_a_fresh_tally_and_a_progress_rewrite_does_not() -> None:
    book = book_with_canary()
    book.receipt(receipt("new", Status.COMPLETED))
    current = book.running[AGENT]
    book.canary(AGENT, current.model_copy(update={"reason": "progress"}))
    assert book.tallies[AGENT].calls == 1
    book.canary(AGENT, current.model_copy(update={"step": 1, "step_started_at": 200}))
    assert book.tallies[AGENT].calls == 0


def completed_with_callback(n: int, at: int = 100) -> Receipt:
    return receipt("new", Status.COMPLETED, at=at).model_copy(
        update={"message_id": f"cb-{n}", "callback": '{"channel":"webhook"}'})


def callbacked(n: int) -> Receipt:
    """The channel agent's CALLBACKED on the original message (its instance is the channel's, not the arm's)."""
    return Receipt(message_id=f"cb-{n}", trace_id="t", tenant="default", capability="text.echo",
                   agent_id="agent://channels/webhook", instance_id="channel-1", status=Status.CALLBACKED, at=150)


def test_missed_callbacks_roll_back_a_canary_whose_calls_all_succeed() -> None:
    book = book_with_canary(started_at=50, step_ms=STEP)
    gate = Gate(min_calls=4, min_callback=0.9, callback_grace_ms=1_000)
    for n in range(5):
        book.receipt(completed_with_callback(n))
    book.receipt(callbacked(0))
    assert book.due(500, gate=gate) == []  # four still inside the grace: nothing settled yet but one
    tally = book.tallies[AGENT]
    assert (tally.successes, tally.callbacked, len(tally.awaited)) == (5, 1, 4)
    [back] = book.due(1_100, gate=gate)  # the grace is over: four missed, 1/5 delivered
    assert back.state is CanaryState.ROLLED_BACK
    assert "callbacks 1/5 delivered" in (back.reason or "")


def test_delivered_callbacks_pass_and_a_step_waits_for_its_callbacks_before_promotion() -> None:
    book = book_with_canary(started_at=50, step_ms=STEP)
    gate = Gate(min_calls=4, min_callback=0.9, callback_grace_ms=60_000)
    for n in range(5):
        book.receipt(completed_with_callback(n))
    assert book.due(STEP + 50, gate=gate) == [], "the step is over but its callbacks are in flight: hold"
    for n in range(5):
        book.receipt(callbacked(n))
    [passed] = book.due(STEP + 60, gate=gate)
    assert passed.step == 1 and "callbacks 5/5 delivered" in (passed.reason or "")


def test_a_step_without_callbacks_is_judged_on_success_alone() -> None:
    book = book_with_canary(started_at=50, step_ms=STEP)
    for _ in range(4):
        book.receipt(receipt("new", Status.COMPLETED))
    [passed] = book.due(STEP + 50, gate=Gate(min_calls=4))
    assert passed.step == 1 and "callbacks" not in (passed.reason or "")


def test_canaries_from_control_records() -> None:
    c = canary("2.0.0")
    assert canaries({"CANARY:x": canary_record(c, by="t")}) == {AGENT: c}


class FakePublisher:
    """Records what the driver writes; fails the first `failures` writes like an unreachable broker."""

    def __init__(self, failures: int = 0) -> None:
        self.written: list[Control] = []
        self.failures = failures

    def __call__(self, record: Control) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("broker unreachable")
        self.written.append(record)


NAMES = Names("unit")


def fed_driver(publisher: FakePublisher, *, leader: bool = True, caught_up: bool = True) -> CanaryDriver:
    driver = CanaryDriver(publish=publisher, settings=CanarySettings(min_calls=3, report_ms=10**9), by="test")
    driver.leader, driver.caught_up = leader, caught_up
    for r in (reg("old", build_version="1.0.0"), reg("new", build_version="2.0.0")):
        driver.record(NAMES.registry, r.instance_id.encode(), encode(r), NAMES)
    record = canary_record(canary("2.0.0", step_ms=STEP), by="cli")
    driver.record(NAMES.control, record.key.encode(), encode(record), NAMES)
    for n in range(3):
        driver.record(NAMES.receipts, b"m", encode(receipt("new", Status.FAILED, at=n + 1)), NAMES)
    return driver


def test_the_leader_rolls_a_failing_canary_back() -> None:
    publisher = FakePublisher()
    written = fed_driver(publisher).tick(STEP // 2)
    assert [c.state for c in written] == [CanaryState.ROLLED_BACK]
    assert publisher.written[0].key == f"CANARY:{AGENT}" and publisher.written[0].canary == written[0]


def test_a_follower_writes_nothing() -> None:
    publisher = FakePublisher()
    assert fed_driver(publisher, leader=False).tick(STEP) == [] and publisher.written == []


def test_a_leader_still_reading_the_control_topic_writes_nothing_until_caught_up() -> None:
    """Its book may hold an old CANARY version: progress written from it would land last and win."""
    publisher = FakePublisher()
    driver = fed_driver(publisher, caught_up=False)
    assert driver.tick(STEP // 2) == [] and publisher.written == []
    driver.caught_up = True
    assert [c.state for c in driver.tick(STEP // 2)] == [CanaryState.ROLLED_BACK]


def test_a_failed_write_is_decided_again_next_tick() -> None:
    publisher = FakePublisher(failures=1)
    driver = fed_driver(publisher)
    assert driver.tick(STEP) == [] and publisher.written == []
    assert [c.state for c in driver.tick(STEP + 1)] == [CanaryState.ROLLED_BACK]


def test_a_bad_record_is_skipped() -> None:
    driver = fed_driver(FakePublisher())
    driver.record(NAMES.receipts, b"m", b"not avro", NAMES)
    driver.record(NAMES.control, b"CANARY:agent://x/y", b"\x00junk", NAMES)
    assert driver.book.tallies[AGENT].calls == 3


def test_cli_parsers() -> None:
    assert parse_steps("5,20,50,100") == [5, 20, 50, 100]
    assert [parse_duration_ms(t) for t in ("60s", "500ms", "2m", "3")] == [60_000, 500, 120_000, 3_000]
    for bad in ("5,50", "50,20,100", "0,100", "x"):
        with pytest.raises(BadCanary):
            parse_steps(bad)
    with pytest.raises(BadCanary):
        parse_duration_ms("soon")


def test_receipts_are_not_decoded_while_no_canary_runs(caplog: pytest.LogCaptureFixture) -> None:
    """Every receipt of the namespace passes the controller; with no canary running none could count."""
    driver = CanaryDriver(publish=FakePublisher(), settings=CanarySettings(), by="test")
    driver.record(NAMES.receipts, b"m", b"\x00not avro", NAMES)
    assert "skipping a bad record" not in caplog.text
    fed = fed_driver(FakePublisher())
    fed.record(NAMES.receipts, b"m", b"\x00not avro", NAMES)
    assert "skipping a bad record" in caplog.text, "with a canary running every receipt is read"
