"""In-memory fakes of the SDK's seams (Sender, LeaseStore), for fast unit tests of failure paths."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from reach import codec
from reach.headers import Headers
from reach.records import Receipt
from reach.retry import Outgoing


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
    """A LeaseStore in a dict; `down = True` makes every call fail as an unreachable Redis does."""

    def __init__(self, owner: str = "me") -> None:
        self.owner = owner
        self.down = False
        self.leases: dict[tuple[str, int], str] = {}
        self.results: dict[tuple[str, int], bytes] = {}
        self.retries: dict[tuple[str, int, int], tuple[Outgoing, ...]] = {}
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int) -> Any:
        from reach.agent.idempotency import Claim

        self._call()
        if (message_id, generation) in self.results:
            return Claim(result=self.results[message_id, generation])
        if (message_id, generation, attempt) in self.retries:
            return Claim(retry=self.retries[message_id, generation, attempt])
        holder = self.leases.setdefault((message_id, generation), self.owner)
        return Claim() if holder == self.owner else Claim(holder=holder)

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        self._call()
        return self.leases.setdefault((message_id, generation), self.owner) == self.owner

    async def release(self, message_id: str, generation: int) -> None:
        self._call()
        if self.leases.get((message_id, generation)) == self.owner:
            del self.leases[message_id, generation]

    async def finish(self, message_id: str, generation: int, receipt: bytes) -> None:
        self._call()
        self.results[message_id, generation] = receipt
        if self.leases.get((message_id, generation)) == self.owner:
            del self.leases[message_id, generation]

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None:
        self._call()
        self.retries[message_id, generation, attempt] = records
