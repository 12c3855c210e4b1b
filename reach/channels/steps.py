"""What a channel agent publishes besides the SDK's receipts: delivery steps (SENT, DELIVERED, and CALLBACKED on
the message a callback closes, each with the channel and the provider's message id) and hand-overs to a backup
channel; each waits for the broker's ack."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from reach.agent.publisher import Sender
from reach.envelopes import now_ms, routing_key
from reach.kafka import codec
from reach.kafka import headers as h
from reach.names import Names
from reach.receipts import receipt_for
from reach.records import ChannelDelivery, Envelope, Receipt, Status


@dataclass(frozen=True, slots=True)
class Closes:
    """The message a callback envelope delivers the outcome of (from its payload's `callback_for`)."""

    message_id: str
    generation: int
    capability: str


class DeliverySteps:
    """Writes delivery steps to `<ns>.receipts` and waits for the broker's ack, so they precede the outcome."""

    def __init__(self, sender: Sender, *, names: Names, agent_id: str, instance_id: str) -> None:
        self._sender = sender
        self._names = names
        self._topic = names.receipts
        self._agent_id = agent_id
        self._instance_id = instance_id

    async def step(self, envelope: Envelope, status: Status, channel: ChannelDelivery) -> None:
        """SENT / DELIVERED / READ of the channel's own message."""
        await self._publish(receipt_for(envelope, status, agent_id=self._agent_id, instance_id=self._instance_id,
                                        channel=channel))

    async def callbacked(self, envelope: Envelope, closes: Closes, channel: ChannelDelivery) -> None:
        """CALLBACKED on the original message: its callback reached DELIVERED."""
        await self._publish(Receipt(
            message_id=closes.message_id, generation=closes.generation, trace_id=envelope.trace_id,
            tenant=envelope.tenant, capability=closes.capability, agent_id=self._agent_id,
            instance_id=None,  # not a call of this instance on that message: health must not count it
            status=Status.CALLBACKED, at=now_ms(),
            channel=channel.model_copy(update={"callback_id": envelope.message_id})))

    async def hand_over(self, envelope: Envelope) -> None:
        """Publish a backup channel's envelope to its capability topic (the catalog names it, not the input)."""
        key = envelope.message_id
        ack = self._sender.send(self._names.capability(envelope.capability), routing_key(envelope),
                                codec.encode(envelope), headers=[(h.MESSAGE_ID, key.encode())])
        await asyncio.wrap_future(ack)

    async def _publish(self, receipt: Receipt) -> None:
        key = receipt.message_id
        ack = self._sender.send(self._topic, key, codec.encode(receipt), headers=[(h.MESSAGE_ID, key.encode())])
        await asyncio.wrap_future(ack)
