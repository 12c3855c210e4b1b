"""The demo's tally: first terminal wins, outcomes per capability/instance/kind, latencies, rates."""

from __future__ import annotations

from reach.records import Decision, ErrorInfo, Receipt, Status
from reach.tooling.demo.tally import Rate, Sent, Tally, percentile


def receipt(status: Status, *, message_id: str = "m1", capability: str = "demo.echo", at: int = 1_000,
            instance: str | None = "i1", attempt: int = 1, generation: int = 0, error: ErrorInfo | None = None,
            decision: Decision | None = None) -> Receipt:
    return Receipt(message_id=message_id, generation=generation, trace_id="t", tenant="default",
                   capability=capability, instance_id=instance, status=status, attempt=attempt, at=at,
                   error=error, decision=decision)


def test_first_terminal_receipt_wins_and_latency_runs_from_created_at() -> None:
    tally = Tally()
    tally.sent("m1", Sent("echo", created_at=900, session_key="s1"))
    tally.add(receipt(Status.ROUTED, instance=None, decision=Decision(picked_instance="i1")))
    tally.add(receipt(Status.COMPLETED, at=1_000))
    tally.add(receipt(Status.COMPLETED, at=5_000))  # a redelivery republishing its cached result
    snap = tally.snapshot()
    assert snap.totals["routed"] == 1 and snap.totals["completed"] == 1
    assert snap.by_instance["i1"].counts["routed"] == 1
    assert snap.latencies_ms == [100] and snap.completed_latencies_ms == [100]
    assert snap.by_kind == {"echo": {"COMPLETED": 1}}
    assert snap.sessions == {"s1": {"i1"}}
    assert snap.pending == 0


def test_overload_retries_and_replays_are_counted_apart() -> None:
    tally = Tally()
    tally.sent("m1", Sent("flaky", created_at=0))
    tally.add(receipt(Status.RETRY_SCHEDULED, capability="demo.flaky"))
    tally.add(receipt(Status.COMPLETED, capability="demo.flaky", attempt=2))
    tally.add(receipt(Status.FAILED, message_id="m2", instance=None,
                      error=ErrorInfo(kind="OVERLOAD", code="OVERLOAD", message="all busy")))
    tally.add(receipt(Status.FAILED, message_id="m3", error=ErrorInfo(kind="BUSINESS", code="X", message="no")))
    tally.add(receipt(Status.DEAD_LETTERED, message_id="m3", generation=1))  # a replay opens a generation
    snap = tally.snapshot()
    assert snap.by_capability["demo.flaky"].counts["retried"] == 1
    assert snap.totals["overload"] == 1 and snap.totals["failed"] == 1 and snap.totals["dead_lettered"] == 1
    assert snap.examples["completed_after_retry"] == "m1"


def test_unknown_messages_count_but_have_no_latency_and_empty_capabilities_get_a_label() -> None:
    tally = Tally()
    tally.sent("mine", Sent("bad", created_at=0))
    tally.add(receipt(Status.REJECTED, message_id="other", capability="", instance=None))
    snap = tally.snapshot()
    assert snap.by_capability["(empty)"].counts["rejected"] == 1
    assert snap.latencies_ms == [] and snap.pending == 1


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([5], 0.99) == 5
    values = list(range(1, 101))
    assert percentile(values, 0.5) == 50 and percentile(values, 0.99) == 99 and percentile(values, 1.0) == 100


def test_rate_over_a_sliding_window() -> None:
    rate = Rate(window_s=3.0)
    assert rate.update(0, now=0.0) == 0.0
    assert rate.update(10, now=1.0) == 10.0
    assert rate.update(40, now=2.0) == 20.0
    for t in range(3, 10):
        last = rate.update(40 + 5 * (t - 2), now=float(t))
    assert last == 5.0


def test_endings_are_checked_against_the_plan_and_overload_is_its_own_ending() -> None:
    tally = Tally()
    tally.sent("ok", Sent("echo", created_at=0, expect="COMPLETED"))
    tally.sent("shed", Sent("echo", created_at=0, expect="COMPLETED"))
    tally.add(receipt(Status.COMPLETED, message_id="ok"))
    tally.add(receipt(Status.FAILED, message_id="shed", instance=None,
                      error=ErrorInfo(kind="OVERLOAD", code="OVERLOAD", message="all busy")))
    snap = tally.snapshot()
    assert snap.by_kind == {"echo": {"COMPLETED": 1, "OVERLOAD": 1}}
    assert (snap.as_planned, snap.unplanned) == (1, 1) and snap.examples["unplanned"] == "shed"


def test_every_terminal_status_has_a_column() -> None:
    from reach.records import TERMINAL
    from reach.tooling.demo.tally import OUTCOME_COLUMNS, outcome_of

    for status in TERMINAL:
        assert outcome_of(receipt(status)) in OUTCOME_COLUMNS, status


def test_each_subscribers_deliveries_are_counted_from_the_fold_notes() -> None:
    from reach.records import FanOut, FanOutDelivery

    def note(agent: str, status: Status | None) -> Receipt:
        return receipt(Status.FANNED_OUT, capability="demo.order.created", instance=None).model_copy(update={
            "fanout": FanOut(deliveries=[FanOutDelivery(agent_id=agent, message_id="m1-s0-x", status=status)])})
    tally = Tally()
    for r in (note("agent://demo/audit", None), note("agent://demo/audit", Status.COMPLETED),
              note("agent://demo/notify", Status.COMPLETED), note("agent://demo/notify", Status.DEAD_LETTERED)):
        tally.add(r)
    assert tally.snapshot().examples["fanned_out"] == "m1"
    assert tally.snapshot().fanout == {"agent://demo/audit": {"COMPLETED": 1},
                                       "agent://demo/notify": {"COMPLETED": 1, "DEAD_LETTERED": 1}}


def test_a_request_with_a_fallback_ends_its_kind_with_the_fallbacks_child() -> None:
    tally = Tally()
    kind = "legacy, served by its fallback (echo)"
    tally.sent("m1", Sent(kind, created_at=100, expect="COMPLETED", fallback="demo.echo"))
    tally.add(receipt(Status.UNROUTABLE, capability="demo.legacy", instance=None, at=200))
    snap = tally.snapshot()
    assert snap.by_kind == {} and snap.pending == 1, "the parent's UNROUTABLE only hands it on"
    assert snap.totals["unroutable"] == 1 and snap.examples["fallback"] == "m1"
    tally.add(receipt(Status.ROUTED, message_id="m1-fb0", instance=None, decision=Decision(picked_instance="i1")))
    tally.add(receipt(Status.COMPLETED, message_id="m1-fb0", at=400))
    snap = tally.snapshot()
    assert snap.by_kind == {kind: {"COMPLETED": 1}} and (snap.as_planned, snap.unplanned) == (1, 0)
    assert snap.pending == 0 and snap.latencies_ms == [300], "latency runs from the caller's created_at"
    assert snap.fallback["demo.echo"].handed_on == {"UNROUTABLE": 1}
    assert snap.fallback["demo.echo"].ended == {"COMPLETED": 1}
    assert snap.by_capability["demo.echo"].counts["completed"] == 1


def test_a_child_read_before_its_parent_still_ends_the_kind_and_leaves_nothing_pending() -> None:
    tally = Tally()
    tally.sent("m1", Sent("legacy", created_at=0, expect="COMPLETED", fallback="demo.echo"))
    tally.add(receipt(Status.COMPLETED, message_id="m1-fb0"))  # receipts partitions are read side by side
    tally.add(receipt(Status.UNROUTABLE, capability="demo.legacy", instance=None))
    snap = tally.snapshot()
    assert snap.by_kind == {"legacy": {"COMPLETED": 1}} and snap.pending == 0


def test_endings_a_fallback_does_not_serve_and_ids_that_are_not_children_count_as_usual() -> None:
    tally = Tally()
    tally.sent("m1", Sent("legacy", created_at=0, expect="COMPLETED", fallback="demo.echo"))
    tally.sent("m2", Sent("echo", created_at=0, expect="COMPLETED"))
    tally.add(receipt(Status.REJECTED, capability="demo.legacy", instance=None))  # the same input: refused again
    tally.add(receipt(Status.COMPLETED, message_id="m2-fb0"))  # m2 has no fallback: not its child
    tally.add(receipt(Status.COMPLETED, message_id="m1-fbx"))  # not a derived child id
    snap = tally.snapshot()
    assert snap.by_kind == {"legacy": {"REJECTED": 1}} and snap.unplanned == 1
    assert snap.fallback == {} and snap.pending == 1
