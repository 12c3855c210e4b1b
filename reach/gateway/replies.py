"""One reply topic per gateway process: a thread reads it and resolves the asyncio future of each waiter."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import cast

from reach.client import Client
from reach.invoke import ReplyInbox, host_client_id
from reach.kafka import clients, codec
from reach.records import Receipt

log = logging.getLogger("reach.gateway.replies")
Key = tuple[str, int]


class _Waiter:
    """A future on the caller's event loop, resolved from the reader thread."""

    def __init__(self, hub: ReplyHub, key: Key, future: asyncio.Future[Receipt]) -> None:
        self._hub = hub
        self._key = key
        self._future = future

    async def result(self, timeout_s: float) -> Receipt | None:
        try:
            return await asyncio.wait_for(asyncio.shield(self._future), timeout_s)
        except TimeoutError:
            return None
        finally:
            self.cancel()

    def cancel(self) -> None:
        self._hub.forget(self._key, self._future)


class ReplyHub(ReplyInbox):
    """reach.invoke's ReplyInbox (its topic, consumer and bounded arrivals), read by one thread for every
    waiting request instead of one blocking `wait` per call."""

    def __init__(self, client: Client, *, client_id: str) -> None:
        super().__init__(client, client_id=client_id)
        self._waiters: dict[Key, asyncio.Future[Receipt]] = {}
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._pump, name="reach-gateway-replies", daemon=True)
        self._thread.start()

    def expect(self, message_id: str, generation: int = 0) -> _Waiter:
        """Register before publishing: a receipt that arrives before `result()` is awaited is kept."""
        key = (message_id, generation)
        future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        with self._lock:
            early = self._arrived.pop(key)
            if early is not None:
                future.set_result(early)
            else:
                self._waiters[key] = future
        return _Waiter(self, key, future)

    def forget(self, key: Key, future: asyncio.Future[Receipt]) -> None:
        with self._lock:
            if self._waiters.get(key) is future:
                del self._waiters[key]

    def healthy(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def _pump(self) -> None:
        try:
            while not self._stop.is_set():
                for msg in clients.take(self._consumer, 500, 0.2):
                    if msg.error() or msg.value() is None:
                        continue
                    try:
                        receipt = codec.decode(cast(bytes, msg.value()), Receipt)
                    except codec.DecodeError:
                        continue
                    self._deliver(receipt)
        except BaseException as exc:  # noqa: BLE001 - surfaced through healthy() and /healthz
            self.error = exc
            log.exception("the reply reader stopped")

    def _deliver(self, receipt: Receipt) -> None:
        key = (receipt.message_id, receipt.generation)
        with self._lock:
            future = self._waiters.pop(key, None)
            if future is None:
                self._arrived.add(receipt)
                return
        future.get_loop().call_soon_threadsafe(_resolve, future, receipt)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        super().close()


def _resolve(future: asyncio.Future[Receipt], receipt: Receipt) -> None:
    if not future.done():
        future.set_result(receipt)


def gateway_client_id(port: int) -> str:
    """A reply-topic id stable per host and port: a restarted replica reuses its topic, two replicas never share."""
    return f"{host_client_id('gw')}-{port}"
