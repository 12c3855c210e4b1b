"""In-memory fakes of the SDK's seams (Sender, LeaseStore, ControlSource), for fast unit tests of failure paths."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from reach.agent.idempotency import Claim, KeyScope
from reach.core.views.controlview import ControlView
from reach.failures import Outgoing
from reach.kafka import codec
from reach.kafka.headers import Headers
from reach.records import Receipt


class FakeSender:
    """Acknowledges every record at once, unless `refuse(topic, value)` returns the error to fail it with."""

    def __init__(self, refuse: Callable[[str, bytes | None], BaseException | None] = lambda _t, _v: None) -> None:
        self.refuse = refuse
        self.sent: list[Outgoing] = []

    def send(self, topic: str, key: str, value: bytes | None, *, headers: Headers | None = None,
             partition: int | None = None) -> Future[Any]:
        future: Future[Any] = Future()
        error = self.refuse(topic, value)
        if error is not None:
            future.set_exception(error)
        else:
            self.sent.append(Outgoing(topic, key, value, list(headers or [])))
            future.set_result(None)
        return future

    def on(self, topic: str) -> list[Outgoing]:
        return [r for r in self.sent if r.topic == topic]

    def receipts(self, topic: str = "ns.receipts") -> list[Receipt]:
        return [codec.decode(r.value or b"", Receipt) for r in self.on(topic)]


class FakeLeases:
    """A LeaseStore in a dict; `down = True` makes every call fail as an unreachable Redis does. Business keys:
    `keys` maps a scope's digest to the message_id running it, `key_results` to its COMPLETED receipt. Pass the
    same dicts to two fakes to model two instances sharing one Redis."""

    def __init__(self, owner: str = "me", *, shared: FakeLeases | None = None) -> None:
        self.owner = owner
        self.down = False
        self.leases: dict[tuple[str, int], str] = shared.leases if shared else {}
        self.results: dict[tuple[str, int], bytes] = shared.results if shared else {}
        self.retries: dict[tuple[str, int, int], tuple[Outgoing, ...]] = shared.retries if shared else {}
        self.keys: dict[str, str] = shared.keys if shared else {}
        self.key_results: dict[str, bytes] = shared.key_results if shared else {}
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int,
                    scope: KeyScope | None = None) -> Claim:
        self._call()
        if (message_id, generation) in self.results:
            done = self.results[message_id, generation]
            cached = self.retries.get((message_id, generation, attempt))
            return Claim(result=done, retry=cached if cached and cached[-1].value == done else None)
        if (message_id, generation, attempt) in self.retries:
            return Claim(retry=self.retries[message_id, generation, attempt])
        if scope is not None:
            if scope.digest in self.key_results:
                return Claim(reused=self.key_results[scope.digest])
            runner = self.keys.get(scope.digest)
            if runner is not None and runner != message_id:
                return Claim(key_holder=runner)
        holder = self.leases.setdefault((message_id, generation), self.owner)
        if holder != self.owner:
            return Claim(holder=holder)
        if scope is not None:
            self.keys[scope.digest] = message_id
        return Claim()

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        self._call()
        return self.leases.setdefault((message_id, generation), self.owner) == self.owner

    async def release(self, message_id: str, generation: int) -> None:
        self._call()
        if self.leases.get((message_id, generation)) == self.owner:
            del self.leases[message_id, generation]

    async def finish(self, message_id: str, generation: int, receipt: bytes, *, scope: KeyScope | None = None,
                     completed: bool = False) -> bytes | None:
        self._call()
        winner = self.results.get((message_id, generation))  # first terminal wins, as _FINISH does
        self.results.setdefault((message_id, generation), receipt)
        if self.leases.get((message_id, generation)) == self.owner:
            del self.leases[message_id, generation]
        if scope is not None:
            if completed:  # won or lost the register: the side effect happened (kept unless a result is there)
                self.key_results.setdefault(scope.digest, receipt)
            if self.keys.get(scope.digest) == message_id:
                del self.keys[scope.digest]
        return winner

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None:
        self._call()
        self.retries[message_id, generation, attempt] = records

    async def restore_key(self, message_id: str, scope: KeyScope, receipt: bytes) -> None:
        self._call()
        self.key_results.setdefault(scope.digest, receipt)
        if self.keys.get(scope.digest) == message_id:
            del self.keys[scope.digest]


class FakeControl:
    """A ControlSource whose view the test changes directly (as records arriving on the control topic would)."""

    def __init__(self) -> None:
        self.view = ControlView()
        self.started = False

    def start(self, timeout: float = 10.0) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False
