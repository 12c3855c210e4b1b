"""The acknowledgement ledger: commit per partition up to the first unacknowledged input, rewind from there."""

from __future__ import annotations

from reach.kafka.acks import Acks


def test_all_acknowledged_commits_past_the_last_record_of_each_partition() -> None:
    acks = Acks()
    for offset in (5, 6, 7):
        acks.expect(("cap", 0, offset))(None, None)
    acks.seen(("cap", 1, 3))  # caused nothing (a tombstone): done at once
    assert acks.commits() == {("cap", 0): 8, ("cap", 1): 4}
    assert acks.rewinds() == {} and acks.unacked() == []


def test_one_refused_record_holds_only_its_own_partition_from_that_record_on() -> None:
    acks = Acks()
    for offset in (5, 6, 7):
        report = acks.expect(("cap", 0, offset))
        report("refused" if offset == 6 else None, None)
    acks.expect(("cap", 1, 9))(None, None)
    assert acks.commits() == {("cap", 0): 6, ("cap", 1): 10}
    assert acks.rewinds() == {("cap", 0): 6}
    assert acks.errors(("cap", 0, 6)) == ["refused"] and acks.errors(("cap", 0, 5)) == []


def test_a_record_still_queued_after_the_flush_is_not_committed() -> None:
    acks = Acks()
    acks.expect(("cap", 0, 1))  # never reported: still in the producer's queue
    acks.expect(("cap", 0, 2))(None, None)
    assert acks.commits() == {} and acks.rewinds() == {("cap", 0): 1}
    assert acks.unacked() == [("cap", 0, 1)]


def test_every_output_of_a_record_must_be_acknowledged() -> None:
    acks = Acks()
    forward, receipt = acks.expect(("cap", 0, 1)), acks.expect(("cap", 0, 1))
    forward(None, None)
    assert acks.commits() == {}
    receipt(None, None)
    assert acks.commits() == {("cap", 0): 2}


def test_a_synchronous_produce_error_fails_the_record() -> None:
    acks = Acks()
    acks.expect(("cap", 0, 1))(None, None)
    acks.fail(("cap", 0, 2), "MSG_SIZE_TOO_LARGE")
    assert acks.commits() == {("cap", 0): 2} and acks.rewinds() == {("cap", 0): 2}
