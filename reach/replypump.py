"""The reply pump: read a reply topic, decode each receipt and hand it to whoever waits for its (message_id,
generation), or keep it (bounded) for a waiter still to come. reach.invoke's blocking `wait` pumps it on the
caller's thread; the gateway's ReplyHub pumps it on one reader thread for every waiting request.

A reply whose ending went on to a fallback names the child (the header `x-reach-fallback: <capability> <child id>`,
written by the status fold): `child_of` tells a waiter which key to wait for next, so it can follow the chain to
its final outcome (reach.invoke.Followed)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from reach.core.fallback import parse_mark, verified_parent
from reach.kafka import codec
from reach.kafka import headers as h
from reach.records import Receipt

Key = tuple[str, int]
Resolve = Callable[[Receipt], None]


class Record(Protocol):
    """What the pump reads of a consumed record (a confluent_kafka Message)."""

    def error(self) -> Any: ...

    def value(self) -> Any: ...


Take = Callable[[int, float], Sequence[Record]]
"""`take(max_records, timeout_s)`: wait up to timeout_s for a first record, return what is there (clients.take)."""


class Arrivals:
    """Receipts read but not yet claimed by a waiter, oldest dropped beyond `limit`.

    A long-lived client reads every reply on its topic, including those of calls that already timed out
    and will never be claimed; the bound keeps that from growing without end."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = limit
        self._receipts: OrderedDict[Key, Receipt] = OrderedDict()
        self.dropped = 0

    def add(self, receipt: Receipt) -> None:
        """Keep the first receipt per (message_id, generation)."""
        key = (receipt.message_id, receipt.generation)
        if key in self._receipts:
            return
        self._receipts[key] = receipt
        while len(self._receipts) > self._limit:
            self._receipts.popitem(last=False)
            self.dropped += 1

    def pop(self, key: Key) -> Receipt | None:
        return self._receipts.pop(key, None)

    def __len__(self) -> int:
        return len(self._receipts)


class ReplyPump:
    """Receipts from `take` to their waiters; thread-safe.

    A record that is an error, empty or no Receipt is skipped: one bad record on a reply topic must not stop the
    replies of everyone else. A receipt nobody waits for is kept in `arrived` (the first per key, bounded). An
    error of `take` itself, or of a waiter's `resolve`, propagates: the reader is broken, its owner decides."""

    def __init__(self, take: Take, *, limit: int = 10_000) -> None:
        self._take = take
        self._lock = threading.Lock()
        self._reading = threading.Lock()  # one blocking `wait` reads at a time; the others find theirs arrived
        self._waiters: dict[Key, Resolve] = {}
        self.arrived = Arrivals(limit)
        self._limit = limit
        self._children: OrderedDict[Key, Key] = OrderedDict()  # a reply's key -> its fallback child's, bounded

    def expect(self, key: Key, resolve: Resolve) -> None:
        """Call `resolve` with key's receipt when it is read, or now when it was read already."""
        with self._lock:
            early = self.arrived.pop(key)
            if early is None:
                self._waiters[key] = resolve
                return
        resolve(early)

    def forget(self, key: Key, resolve: Resolve) -> None:
        """Stop waiting (only `resolve`'s own registration: a later waiter of the key stays)."""
        with self._lock:
            if self._waiters.get(key) is resolve:
                del self._waiters[key]

    def claim(self, key: Key) -> Receipt | None:
        """Key's receipt when it was read and nobody waited for it; taken once."""
        with self._lock:
            return self.arrived.pop(key)

    def child_of(self, key: Key) -> Key | None:
        """The fallback child key's reply named (its ending went on to the capability's fallback), taken once; None
        when it named none. Known once key's receipt was handed out."""
        with self._lock:
            return self._children.pop(key, None)

    def wait(self, key: Key, timeout_s: float, *, batch: int = 100) -> Receipt | None:
        """Pump on the caller's thread until key's receipt is read (None when `timeout_s` passes first)."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._reading:
                found = self.claim(key)
                if found is not None:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.pump(batch, min(left, 0.2))

    def pump(self, max_records: int, timeout_s: float) -> int:
        """One read of up to `max_records` records (waiting at most `timeout_s`); the number of receipts read."""
        read = 0
        for record in self._take(max_records, timeout_s):
            receipt = _receipt(record)
            if receipt is not None:
                read += 1
                self._link(receipt, record)
                self._deliver(receipt)
        return read

    def _link(self, receipt: Receipt, record: Record) -> None:
        """Remember the fallback child a reply names (before its waiter is resolved, so the waiter sees it). Only a
        child id the product derives from this message (reach.core.fallback.child_id) is followed."""
        ref = parse_mark(_header(record, h.FALLBACK))
        if ref is None or ref.message_id is None or verified_parent(ref.message_id, receipt.message_id) is None:
            return
        with self._lock:
            self._children[(receipt.message_id, receipt.generation)] = (ref.message_id, 0)
            while len(self._children) > self._limit:
                self._children.popitem(last=False)

    def _deliver(self, receipt: Receipt) -> None:
        key = (receipt.message_id, receipt.generation)
        with self._lock:
            resolve = self._waiters.pop(key, None)
            if resolve is None:
                self.arrived.add(receipt)
                return
        resolve(receipt)


def _header(record: Record, name: str) -> str | None:
    headers = getattr(record, "headers", None)  # a test's record may carry none
    for key, value in (headers() if headers is not None else None) or ():
        if key == name and value:
            return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
    return None


def _receipt(record: Record) -> Receipt | None:
    if record.error() or record.value() is None:
        return None
    try:
        return codec.decode(cast(bytes, record.value()), Receipt)
    except codec.DecodeError:
        return None
