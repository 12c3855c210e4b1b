"""The commit ledger and its shell: one commit in flight per consumer, coalesced, resent until confirmed."""

from __future__ import annotations

import functools
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException

from reach.core.commits import CommitLedger
from reach.kafka import clients
from tests.unit.streams.kafka_fakes import FakeConsumer

CAP = "t.cap.echo"


def test_one_commit_in_flight_newer_points_coalesce_into_the_next() -> None:
    ledger = CommitLedger()
    ledger.want({(CAP, 0): 5})
    assert ledger.take(0.0) == {(CAP, 0): 5}
    for offset in range(6, 300):  # a batch per record while the broker has not answered
        ledger.want({(CAP, 0): offset, (CAP, 1): offset})
        assert ledger.take(0.1) == {}, "nothing more is sent while a commit is in flight"
    ledger.answered((CAP, 0), 5, ok=True)
    assert ledger.take(0.2) == {(CAP, 0): 299, (CAP, 1): 299}, "one commit carries the newest point of each"
    assert ledger.take(0.3) == {}


def test_a_failed_commit_is_sent_again_and_a_confirmed_one_is_not() -> None:
    ledger = CommitLedger()
    ledger.want({(CAP, 0): 2})
    assert ledger.take(0.0) == {(CAP, 0): 2}
    ledger.answered((CAP, 0), 2, ok=False)  # the partition then goes idle
    assert ledger.take(0.1) == {(CAP, 0): 2}
    ledger.answered((CAP, 0), 2, ok=True)
    assert ledger.take(0.2) == {} and ledger.unconfirmed() == {}


def test_a_timer_spaces_the_commits_and_the_next_carries_every_point_reached_meanwhile() -> None:
    ledger = CommitLedger(every_s=0.1)
    sent = []
    for turn in range(10):  # a point every 30 ms, each commit answered at once
        now = turn * 0.03
        ledger.want({(CAP, 0): turn + 1})
        out = ledger.take(now)
        if out:
            sent.append((round(now, 2), out))
            ledger.answered((CAP, 0), out[(CAP, 0)], ok=True)
    assert sent == [(0.0, {(CAP, 0): 1}), (0.12, {(CAP, 0): 5}), (0.24, {(CAP, 0): 9})]
    assert ledger.unconfirmed() == {(CAP, 0): 10}, "the final, synchronous commit does not wait for the timer"


def test_a_failed_commit_waits_for_the_timer_too() -> None:
    ledger = CommitLedger(every_s=0.1)
    ledger.want({(CAP, 0): 2})
    ledger.take(0.0)
    ledger.answered((CAP, 0), 2, ok=False)
    assert ledger.take(0.05) == {}
    assert ledger.take(0.15) == {(CAP, 0): 2}


def test_a_late_failure_of_an_older_commit_does_not_resend_a_confirmed_one() -> None:
    ledger = CommitLedger(stale_after_s=1.0)
    ledger.want({(CAP, 0): 2})
    ledger.take(0.0)
    ledger.want({(CAP, 0): 3})
    assert ledger.take(2.0) == {(CAP, 0): 3}, "an unanswered commit is lost after stale_after_s"
    ledger.answered((CAP, 0), 3, ok=True)
    ledger.answered((CAP, 0), 2, ok=False)
    assert ledger.take(2.1) == {}


def test_an_unanswered_commit_does_not_stop_committing_for_good() -> None:
    ledger = CommitLedger(stale_after_s=30.0)
    ledger.want({(CAP, 0): 2})
    ledger.take(0.0)
    assert ledger.take(29.0) == {}
    assert ledger.take(30.0) == {(CAP, 0): 2}


def test_the_shell_sends_one_commit_at_a_time_and_resends_what_failed_on_an_idle_turn() -> None:
    ledger = CommitLedger()
    consumer = FakeConsumer(assigned={(CAP, 0), (CAP, 1)})
    answer = functools.partial(clients.on_commit, ledger)
    ledger.want({(CAP, 0): 5, (CAP, 1): 3})
    clients.send_commits(cast(Any, consumer), ledger)
    ledger.want({(CAP, 0): 6})
    clients.send_commits(cast(Any, consumer), ledger)  # in flight: nothing more goes out
    assert consumer.committed_at() == {(CAP, 0): 5, (CAP, 1): 3} and len(consumer.commits) == 2
    consumer.answer(answer, KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
    consumer.commits.clear()
    clients.send_commits(cast(Any, consumer), ledger)  # an idle turn: the failed commit goes out again, newest
    assert consumer.committed_at() == {(CAP, 0): 6, (CAP, 1): 3}
    consumer.answer(answer)
    consumer.commits.clear()
    clients.send_commits(cast(Any, consumer), ledger)
    assert consumer.commits == [], "a confirmed commit is not sent again"


def test_a_revoked_partition_is_not_committed_and_does_not_hold_the_flight() -> None:
    ledger = CommitLedger()
    consumer = FakeConsumer(assigned={(CAP, 0)})  # partition 1 moved to another worker meanwhile
    ledger.want({(CAP, 0): 9, (CAP, 1): 3})
    clients.send_commits(cast(Any, consumer), ledger)
    assert consumer.committed_at() == {(CAP, 0): 9}, "only where this worker still owns"
    consumer.answer(functools.partial(clients.on_commit, ledger))
    assert ledger.unconfirmed() == {} and not ledger.in_flight()


def test_a_commit_that_could_not_be_sent_is_sent_on_the_next_turn() -> None:
    class Refusing(FakeConsumer):
        def commit(self, *, offsets: Any, asynchronous: bool = True) -> Any:
            raise KafkaException(KafkaError(KafkaError._NO_OFFSET))

    ledger = CommitLedger()
    ledger.want({(CAP, 0): 4})
    clients.send_commits(cast(Any, Refusing(assigned={(CAP, 0)})), ledger)
    assert not ledger.in_flight() and ledger.unconfirmed() == {(CAP, 0): 4}


def test_the_final_commit_goes_out_whatever_is_in_flight() -> None:
    class Sync(FakeConsumer):
        def commit(self, *, offsets: Any, asynchronous: bool = True) -> Any:
            super().commit(offsets=offsets, asynchronous=asynchronous)
            return None if asynchronous else offsets

    ledger = CommitLedger()
    consumer = Sync(assigned={(CAP, 0), (CAP, 1)})
    ledger.want({(CAP, 0): 5, (CAP, 1): 2})
    clients.send_commits(cast(Any, consumer), ledger)
    ledger.want({(CAP, 0): 8})
    clients.commit_now(cast(Any, consumer), ledger, [(CAP, 0)])  # a revoke of partition 0
    assert consumer.commits[-1].offset == 8 and ledger.unconfirmed() == {(CAP, 1): 2}
