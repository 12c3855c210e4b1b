"""The client SDK on asyncio: `await send(...)` returns once the broker acknowledged the envelope, and many concurrent
sends share the producer's batches; `await invoke(...)` waits for the terminal reply.

The event loop polls the producer while acknowledgements are awaited, each report resolving its caller's future
(reach.kafka.pipeline.AsyncProducer); one reader thread pumps the reply topic for every waiting invoke
(reach.replyhub.ReplyHub). No call holds a thread. One AsyncClient serves one event loop. Envelopes are built as
reach.client.Client builds them (its settings, POLICY defaults and lineage), and the first read of a topic's
metadata or of the control topic runs on a worker thread, off the loop. Decision 0057.
"""

from __future__ import annotations

import asyncio
from typing import Any, Self

from reach import invoke as invoke_
from reach import lineage
from reach.client import Client, Request, Sent, send_failure
from reach.controlfeed import ControlSource
from reach.kafka import clients, pipeline
from reach.records import Envelope, Receipt
from reach.replyhub import ReplyHub
from reach.settings import KafkaSettings, ReachSettings


class AsyncClient:
    """Publishes envelopes from asyncio code, each acknowledged; `invoke` waits for the reply. Use it as
    `async with AsyncClient() as client:`, or call `await client.close()`."""

    def __init__(self, *, kafka: KafkaSettings | None = None, settings: ReachSettings | None = None,
                 source: str = "reach-client", follow_control: bool = True, control: ControlSource | None = None,
                 client_id: str | None = None, follow_registry: bool = True) -> None:
        self.client = Client(kafka=kafka, settings=settings, source=source, follow_control=follow_control,
                             control=control, follow_registry=follow_registry)
        self._producer = pipeline.AsyncProducer(clients.producer(self.client.kafka, profile="hot"))
        self._client_id = client_id
        self._replies: ReplyHub | None = None
        self._opening: asyncio.Lock | None = None

    async def envelope(self, capability: str, payload: Any, **fields: Any) -> Envelope:
        """`Client.envelope` (POLICY defaults, lineage, budget, schema_version); the first reads of the control and
        registry topics run off the loop."""
        if not self.client.control_ready():
            await asyncio.to_thread(self.client.policy, capability)
        contracts = self.client.contracts
        if contracts is not None and not contracts.started:  # the registry's first read (schema_version), off the loop
            await asyncio.to_thread(contracts.start)
        return self.client.envelope(capability, payload, **fields)

    async def send(self, capability: str, payload: Any, **fields: Any) -> str:
        """Build an envelope for `capability`, publish it and return its message_id once the broker acknowledged
        it; SendRefused / SendUnacknowledged (both reach.client.SendFailed) otherwise."""
        envelope = await self.envelope(capability, payload, **fields)
        await self.publish(envelope)
        return envelope.message_id

    async def send_many(self, requests: list[Request | tuple[str, Any]]) -> list[Sent]:
        """`Client.send_many` on the loop: every request built first (a bad one raises, nothing sent), then all sent
        at once; one Sent per request, in order, a refused or unacknowledged one carrying its SendFailed."""
        envelopes = [await self.envelope(r.capability, r.payload, **r.fields) if isinstance(r, Request)
                     else await self.envelope(r[0], r[1]) for r in requests]
        records = [await self._outbound(envelope) for envelope in envelopes]
        outcomes = await asyncio.gather(*(self._producer.deliver(record) for record in records))
        return [Sent(e.message_id, r.topic, None if o is None else send_failure(e.message_id, o))
                for e, r, o in zip(envelopes, records, outcomes, strict=True)]

    async def publish(self, envelope: Envelope, *, topic: str | None = None, partition: int | None = None) -> None:
        """Publish one built envelope (default: to its capability topic) and wait for its acknowledgement."""
        outcome = await self._producer.deliver(await self._outbound(envelope, topic=topic, partition=partition))
        if outcome is not None:
            raise send_failure(envelope.message_id, outcome)

    async def _outbound(self, envelope: Envelope, *, topic: str | None = None,
                        partition: int | None = None) -> pipeline.Outbound:
        target = topic or self.client.target(envelope)
        if not self.client.ensured(target):  # metadata round trips (and maybe a topic creation): off the loop
            await asyncio.to_thread(self.client.ensure_topic, target)
        return self.client.outbound(envelope, topic=target, partition=partition)

    async def replies(self) -> ReplyHub:
        """This client's reply topic `<ns>.replies.<client_id>`, created and read from on first use."""
        if self._replies is None:
            self._opening = self._opening or asyncio.Lock()
            async with self._opening:
                if self._replies is None:
                    self._replies = await asyncio.to_thread(ReplyHub, self.client, client_id=self._client_id,
                                                            name="reach-client-replies")
        return self._replies

    async def invoke_receipt(self, capability: str, payload: Any, *, version: str = "*",
                             timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> Receipt:
        """Send a request and return the terminal receipt of its fallback chain, whatever its status (InvokeTimeout
        when none comes within timeout_ms)."""
        return (await self.invoke_outcome(capability, payload, version=version, timeout_ms=timeout_ms,
                                          **fields)).receipt

    async def invoke_outcome(self, capability: str, payload: Any, *, version: str = "*",
                             timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> invoke_.Followed:
        """Send a request and return every ending of its fallback chain (reach.invoke.Followed), as
        `Client.invoke_outcome`."""
        hub = await self.replies()
        fields.setdefault("budget_ms", max(timeout_ms, 1))
        envelope = await self.envelope(capability, payload, version=version, reply_to=hub.topic, **fields)
        waiter = hub.expect(envelope.message_id, envelope.generation)  # before publishing: a fast reply is kept
        try:
            await self.publish(envelope)
        except BaseException:
            waiter.cancel()
            raise
        receipt = await waiter.result(timeout_ms / 1000)
        if receipt is None:
            if waiter.endings:
                raise invoke_.chain_timeout(waiter.endings, waiter.waiting_for, timeout_ms)
            raise invoke_.no_reply(envelope.message_id, timeout_ms)
        for ending in waiter.endings:  # from a handler: what each run spent counts towards its parent's budget
            lineage.child_ended(ending)
        return invoke_.Followed(tuple(waiter.endings))

    async def invoke(self, capability: str, payload: Any, *, version: str = "*",
                     timeout_ms: int = invoke_.DEFAULT_TIMEOUT_MS, **fields: Any) -> Any:
        """Send a request and return the agent's result; raises InvokeFailed / InvokeRejected / InvokeUnroutable /
        InvokeTimeout / InputRequired (all reach.invoke.InvokeError) for any other ending, as `Client.invoke`."""
        followed = await self.invoke_outcome(capability, payload, version=version, timeout_ms=timeout_ms, **fields)
        invoke_.raise_for_chain(followed)
        return invoke_.result_value(followed.receipt)

    async def close(self, timeout_s: float = 10.0) -> None:
        """Wait up to timeout_s for the broker to acknowledge what is queued (a send still waiting after that
        raises SendUnacknowledged), stop reading replies, stop following the control topic."""
        await self._producer.aclose(timeout_s)
        if self._replies is not None:
            await asyncio.to_thread(self._replies.close)
            self._replies = None
        await asyncio.to_thread(self.client.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()
