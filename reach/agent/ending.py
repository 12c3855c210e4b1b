"""The agent's claim of a message's terminal register (reach.terminals: first terminal wins) before it publishes."""

from __future__ import annotations

import asyncio
import logging

from reach.agent.idempotency import KeyScope, LeaseStore
from reach.agent.outage import Outage
from reach.agent.publisher import Sender
from reach.agent.redisguard import redis_call
from reach.failures import Outgoing

log = logging.getLogger("reach.agent")


async def claim_ending(outage: Outage, leases: LeaseStore, message_id: str, generation: int, ending: bytes, *,
                       scope: KeyScope | None = None, completed: bool = False) -> bytes:
    """The terminal receipt bytes to publish: `ending` when it won the register (or it was ours already, or Redis
    is out: availability first), else the ending that won it."""
    winner = await redis_call(outage, lambda: leases.finish(message_id, generation, ending, scope=scope,
                                                             completed=completed))
    if winner is None or winner == ending:
        return ending
    log.info("%s already ended before this ending; publishing that first ending instead", message_id)
    return winner


async def publish_ending(publisher: Sender, records: tuple[Outgoing, ...], *, outage: Outage,
                         leases: LeaseStore | None, message_id: str, generation: int) -> bytes:
    """Publish the records of a terminal decision (a dead letter then its receipt, or an expiry) in order, after
    claiming the register with their receipt (the last record). When another ending won, only that ending is
    published: no dead letter for a message that had ended. Returns the receipt bytes published."""
    last = records[-1]
    ending = last.value or b""
    won = ending if leases is None else await claim_ending(outage, leases, message_id, generation, ending)
    if won != ending:
        records = (Outgoing(last.topic, message_id, won, last.headers),)
    await publish_in_order(publisher, records)
    return won


async def publish_in_order(publisher: Sender, records: tuple[Outgoing, ...]) -> None:
    """Produce each record after the previous one is acknowledged (a receipt never precedes its record)."""
    for record in records:
        await asyncio.wrap_future(publisher.send(record.topic, record.key, record.value, headers=record.headers))
