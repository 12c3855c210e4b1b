"""The agent's claim of a message's terminal register (reach.terminals: first terminal wins) before it publishes,
and the endings it published while Redis was out (Unfenced), claimed as soon as Redis answers again."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass

from reach.agent.idempotency import KeyScope, LeaseStore
from reach.agent.outage import Outage
from reach.agent.publisher import Sender
from reach.agent.redisguard import redis_call
from reach.failures import Outgoing

log = logging.getLogger("reach.agent")


DEFAULT_MAX_UNFENCED = 10_000
"""Endings kept for a later claim while Redis is out: at 200 endings/s, a 50 s outage (the oldest go first)."""


@dataclass(frozen=True, slots=True)
class _Ending:
    ending: bytes
    scope: KeyScope | None
    completed: bool


class Unfenced:
    """The endings published while Redis was out (availability first, reach.terminals), by (message_id, generation).

    Such an ending is on Kafka but not in the first-terminal register, so for as long as the status fold has not
    read it, a reroute or an expiry of the same message finds the register empty and ends it a second time (the
    fault suite's redis-restart run of 2026-12-03, docs/reliability.md). `settle` claims them once Redis answers:
    from then on the timekeeper's and the router's claims find the ending that went out first. One instance, one
    event loop; bounded (the oldest are dropped, counted in `dropped`)."""

    def __init__(self, *, max_entries: int = DEFAULT_MAX_UNFENCED) -> None:
        self._max = max_entries
        self._pending: OrderedDict[tuple[str, int], _Ending] = OrderedDict()
        self._settling = False
        self.dropped = 0   # forgotten past the bound, never claimed
        self.claimed = 0   # claimed after Redis came back, the register still empty (or ours)
        self.twice = 0     # another ending had taken the register meanwhile: the message ended twice

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, message_id: str, generation: int, ending: bytes, *, scope: KeyScope | None = None,
            completed: bool = False) -> None:
        self._pending[message_id, generation] = _Ending(ending, scope, completed)
        self._pending.move_to_end((message_id, generation))
        while len(self._pending) > self._max:
            self._pending.popitem(last=False)
            self.dropped += 1

    async def settle(self, outage: Outage, leases: LeaseStore) -> None:
        """Claim every pending ending in one batch (one pipeline: reach.agent.idempotency), unless Redis is still
        backing off; what Redis did not answer stays pending. One settle at a time."""
        if not self._pending or self._settling or not outage.available():
            return
        self._settling = True
        try:
            batch = list(self._pending.items())
            winners = await redis_call(outage, lambda: asyncio.gather(*(
                leases.finish(mid, gen, e.ending, scope=e.scope, completed=e.completed) for (mid, gen), e in batch)))
            if winners is None:
                return
            log.info("Redis answers again: %d ending(s) published while it was out are claimed in the register",
                     len(batch))
            for ((mid, gen), e), winner in zip(batch, winners, strict=True):
                if self._pending.get((mid, gen)) is e:
                    del self._pending[mid, gen]
                if winner is None or winner == e.ending:
                    self.claimed += 1
                else:
                    self.twice += 1
                    log.warning("%s generation %d had ended otherwise while Redis was out; its ending published "
                                "then did not reach the register, so it has two different endings on Kafka",
                                mid, gen)
        finally:
            self._settling = False


async def claim_ending(outage: Outage, leases: LeaseStore, message_id: str, generation: int, ending: bytes, *,
                       scope: KeyScope | None = None, completed: bool = False,
                       unfenced: Unfenced | None = None) -> bytes:
    """The terminal receipt bytes to publish: `ending` when it won the register (or it was ours already, or Redis
    is out: availability first, and `unfenced` keeps it to claim later), else the ending that won it."""
    answer = await redis_call(outage, lambda: _answered(leases.finish(message_id, generation, ending, scope=scope,
                                                                       completed=completed)))
    if answer is None:
        if unfenced is not None:
            unfenced.add(message_id, generation, ending, scope=scope, completed=completed)
        return ending
    if unfenced is not None and unfenced:
        await unfenced.settle(outage, leases)
    winner = answer[0]
    if winner is None or winner == ending:
        return ending
    log.info("%s already ended before this ending; publishing that first ending instead", message_id)
    return winner


async def _answered(call: Awaitable[bytes | None]) -> tuple[bytes | None]:
    """Redis's answer in a tuple, so that None (ours won) differs from no answer (Redis out: redis_call's None)."""
    return (await call,)


async def publish_ending(publisher: Sender, records: tuple[Outgoing, ...], *, outage: Outage,
                         leases: LeaseStore | None, message_id: str, generation: int,
                         unfenced: Unfenced | None = None) -> bytes:
    """Publish the records of a terminal decision (a dead letter then its receipt, or an expiry) in order, after
    claiming the register with their receipt (the last record). When another ending won, only that ending is
    published: no dead letter for a message that had ended. Returns the receipt bytes published."""
    last = records[-1]
    ending = last.value or b""
    won = ending if leases is None else await claim_ending(outage, leases, message_id, generation, ending,
                                                           unfenced=unfenced)
    if won != ending:
        records = (Outgoing(last.topic, message_id, won, last.headers),)
    await publish_in_order(publisher, records)
    return won


async def publish_in_order(publisher: Sender, records: tuple[Outgoing, ...]) -> None:
    """Produce each record after the previous one is acknowledged (a receipt never precedes its record)."""
    for record in records:
        await asyncio.wrap_future(publisher.send(record.topic, record.key, record.value, headers=record.headers))
