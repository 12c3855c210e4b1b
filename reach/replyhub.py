"""A reply inbox for asyncio callers: one thread pumps the reply topic (reach.replypump) and resolves each waiter's
future on its event loop; the gateway's and reach.aioclient.AsyncClient's."""

from __future__ import annotations

import asyncio
import logging
import threading

from reach import client as sdk
from reach.invoke import MAX_CHAIN, ReplyInbox
from reach.records import Receipt
from reach.replypump import Key, ReplyPump

log = logging.getLogger("reach.replies")


class _Waiter:
    """A future on the caller's event loop; the pump calls the waiter (from its reader thread) to resolve it. It
    follows the request's fallback chain: `result` is the chain's final ending, `endings` every ending so far."""

    def __init__(self, pump: ReplyPump, key: Key) -> None:
        self._pump = pump
        self._key = key
        self._future: asyncio.Future[Receipt] = asyncio.get_running_loop().create_future()
        self.endings: list[Receipt] = []

    def __call__(self, receipt: Receipt) -> None:
        """From the reader thread (or at once, when the receipt was read before `expect`)."""
        self._future.get_loop().call_soon_threadsafe(_resolve, self._future, receipt)

    @property
    def waiting_for(self) -> str:
        """The message id waited for now (a fallback child's once the request's own ending went on to it)."""
        return self._key[0]

    async def result(self, timeout_s: float) -> Receipt | None:
        """The final ending of the request's fallback chain; None when it (or a child's) did not come in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        try:
            while True:
                try:
                    receipt = await asyncio.wait_for(asyncio.shield(self._future), max(deadline - loop.time(), 0))
                except TimeoutError:
                    return None
                self.endings.append(receipt)
                child = self._pump.child_of(self._key)
                if child is None or len(self.endings) > MAX_CHAIN:
                    return receipt
                self._key, self._future = child, loop.create_future()
                self._pump.expect(child, self)
        finally:
            self.cancel()

    def cancel(self) -> None:
        self._pump.forget(self._key, self)


class ReplyHub(ReplyInbox):
    """reach.invoke's ReplyInbox (its topic, consumer and reply pump), pumped by one thread for every waiting
    request instead of one blocking `wait` per call."""

    def __init__(self, client: sdk.Client, *, client_id: str | None = None, name: str = "reach-replies") -> None:
        super().__init__(client, client_id=client_id)
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def expect(self, message_id: str, generation: int = 0) -> _Waiter:
        """Register before publishing: a receipt that arrives before `result()` is awaited is kept."""
        key = (message_id, generation)
        waiter = _Waiter(self._pump, key)
        self._pump.expect(key, waiter)
        return waiter

    def healthy(self) -> bool:
        return self._thread.is_alive() and self.error is None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._pump.pump(500, 0.2)
        except BaseException as exc:  # noqa: BLE001 - surfaced through healthy() and /healthz
            self.error = exc
            log.exception("the reply reader stopped")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        super().close()


def _resolve(future: asyncio.Future[Receipt], receipt: Receipt) -> None:
    if not future.done():
        future.set_result(receipt)
