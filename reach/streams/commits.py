"""The router's commit ledger: per input partition, the commit it wants until the broker confirms it.

Commits are asynchronous; their results arrive in the consumer's on_commit callback. A commit the
broker did not confirm is handed out again on the next loop turn, so the last commit of a partition
that then goes idle is resent instead of forgotten (forgotten, it meant a redelivery of acknowledged
records after the next rebalance). A newer commit supersedes an older one; a partition the worker
no longer owns is forgotten, so an old offset never overwrites its new owner's commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

TopicPart = tuple[str, int]


@dataclass
class _Commit:
    want: int                   # the next offset to read, once everything before it is acknowledged
    sent: int | None = None     # handed out by take() and not answered yet
    confirmed: int | None = None


class CommitLedger:
    """Pure: the router feeds it a batch's commits and the broker's answers, and asks what to send now."""

    def __init__(self) -> None:
        self._parts: dict[TopicPart, _Commit] = {}

    def want(self, commits: dict[TopicPart, int]) -> None:
        """A batch's commit points (never lower than what was asked before: offsets only move forward)."""
        for tp, offset in commits.items():
            part = self._parts.get(tp)
            if part is None:
                self._parts[tp] = _Commit(offset)
            elif offset > part.want:
                part.want = offset

    def take(self) -> dict[TopicPart, int]:
        """Commits to send now: wanted, neither confirmed nor in flight."""
        out: dict[TopicPart, int] = {}
        for tp, part in self._parts.items():
            if part.want not in (part.confirmed, part.sent):
                out[tp] = part.sent = part.want
        return out

    def answered(self, tp: TopicPart, offset: int, *, ok: bool) -> None:
        """The broker's answer to a commit of `offset` on `tp`; a failure is handed out again by take()."""
        part = self._parts.get(tp)
        if part is None:
            return
        if ok and (part.confirmed is None or offset > part.confirmed):
            part.confirmed = offset
        if part.sent is not None and (part.sent == offset or (ok and part.sent <= offset)):
            part.sent = None

    def forget(self, tps: Iterable[TopicPart]) -> None:
        """Partitions this worker no longer owns: their next owner commits them."""
        for tp in tps:
            self._parts.pop(tp, None)

    def unconfirmed(self) -> dict[TopicPart, int]:
        """Wanted commits the broker has not confirmed yet (in flight or to be resent)."""
        return {tp: p.want for tp, p in self._parts.items() if p.want != p.confirmed}
