"""A consumer's commit ledger: per input partition, the commit it wants, and at most one commit in flight.

Pure: the shell feeds it commit points and the broker's answers (reach.kafka.clients.send_commits / on_commit) and
asks what to send now. Commits are asynchronous and **one is in flight per consumer at a time**: while the
broker has not answered the last one, newer commit points only accumulate, and the next commit carries the
newest point of every partition (commits coalesce by themselves under load). Unbounded async commits queue
on the group coordinator's connection in front of the heartbeats; at ~275 commits/s against a broker that
answers ~170/s (each waits out `group.coordinator.append.linger.ms`) the session expired and the group
stopped for 12-15 s (decision 0024).

A commit the broker did not confirm is handed out again on the next call, so the last commit of a partition
that then goes idle is resent instead of forgotten. A newer commit supersedes an older one; a partition the
consumer no longer owns is forgotten, so an old offset never overwrites its new owner's commit. librdkafka
answers every asynchronous commit; a commit unanswered for `stale_after_s` is still treated as lost, so a
missing answer cannot stop committing for good.

`every_s` spaces the asynchronous commits out as well: one is sent at most every `every_s` seconds, the next
carrying every point reached meanwhile. At a paced rate the broker answers within milliseconds, so one commit in
flight alone still meant about one OffsetCommit per record; the agent commits on a short timer (decision 0044,
addendum). Waiting only delays a commit: a point is wanted once everything before it is acknowledged, whenever
it goes out. The synchronous final commits (`unconfirmed`, reach.kafka.clients.commit_now) ignore the timer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TopicPart = tuple[str, int]

STALE_AFTER_S = 30.0


@dataclass
class _Commit:
    want: int                   # the next offset to read, once everything before it is acknowledged
    confirmed: int | None = None


class CommitLedger:
    """What one consumer wants committed, what is in flight, and what the broker confirmed."""

    def __init__(self, *, stale_after_s: float = STALE_AFTER_S, every_s: float = 0.0) -> None:
        self._parts: dict[TopicPart, _Commit] = {}
        self._flight: dict[TopicPart, int] = {}  # the commit sent and not answered yet
        self._sent_at = 0.0
        self._last_sent: float | None = None  # when the last non-empty commit went out (the timer's start)
        self._stale_after_s = stale_after_s
        self._every_s = every_s

    def want(self, commits: dict[TopicPart, int]) -> None:
        """Commit points (never lower than what was asked before: offsets only move forward)."""
        for tp, offset in commits.items():
            part = self._parts.get(tp)
            if part is None:
                self._parts[tp] = _Commit(offset)
            elif offset > part.want:
                part.want = offset

    def take(self, now: float) -> dict[TopicPart, int]:
        """The commit to send now: every wanted, unconfirmed point; nothing while a commit is in flight, nor
        within `every_s` of the last one sent."""
        if self._flight and now - self._sent_at < self._stale_after_s:
            return {}
        if self._last_sent is not None and now - self._last_sent < self._every_s:
            return {}
        out = self.unconfirmed()
        self._flight, self._sent_at = dict(out), now
        if out:
            self._last_sent = now
        return out

    def answered(self, tp: TopicPart, offset: int, *, ok: bool) -> None:
        """The broker's answer to a commit of `offset` on `tp`; a failure is handed out again by take()."""
        part = self._parts.get(tp)
        if part is not None and ok and (part.confirmed is None or offset > part.confirmed):
            part.confirmed = offset
        sent = self._flight.get(tp)
        if sent is not None and (sent == offset or (ok and sent <= offset)):
            del self._flight[tp]

    def forget(self, tps: Iterable[TopicPart]) -> None:
        """Partitions this consumer no longer owns: their next owner commits them."""
        for tp in tps:
            self._parts.pop(tp, None)
            self._flight.pop(tp, None)

    def in_flight(self) -> bool:
        return bool(self._flight)

    def unconfirmed(self) -> dict[TopicPart, int]:
        """Wanted commits the broker has not confirmed yet (in flight or to be resent)."""
        return {tp: p.want for tp, p in self._parts.items() if p.want != p.confirmed}
