"""First terminal wins: one Redis register per (namespace, message_id, generation) holds the receipt that ended it.

Every writer of a terminal receipt (the agent SDK, the router, the timekeeper) claims the register before it
publishes: the first claim stores its receipt bytes, a later one gets those bytes back and republishes them
instead of its own (a repeated terminal, never a second, different one). The register is the agent's result
cache (`<ns>:result:{<id>}:<gen>`), so a redelivery of a message the router or the timekeeper ended republishes
that ending instead of running the handler. Redis is still a cache: a flush or restart forgets the winners, and
while it is unreachable every writer publishes its own terminal (availability first; counted as `unfenced`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import redis
import redis.cluster
from redis.exceptions import RedisError

from reach.agent.outage import Outage
from reach.core.retention import RESULT_TTL_S
from reach.errors import InfraUnavailable
from reach.kafka import codec
from reach.kafka.acks import Position
from reach.records import Receipt
from reach.redisclient import SyncRedis, by_slot, mget, sync_client, tag
from reach.settings import RedisSettings

log = logging.getLogger("reach.terminals")

DEFAULT_TTL_S = RESULT_TTL_S
"""How long a winner is remembered; the agent's result cache keeps its receipts as long (Agent.result_ttl_s);
reach.core.retention says why 30 min and what covers a delivery older than that."""

REDIS_TIMEOUT_S = 0.5
"""A hung Redis costs a batch at most this long, then the fence is skipped for a backoff (never blocks routing)."""

# SET-if-absent per key, returning the value already there ('' when this claim won: a receipt is never empty).
# KEYS: the slots of a batch; ARGV: their receipts, then the TTL. One script call per batch on one Redis: a pipeline
# of one call per slot took 3x as long for 500 slots (decision 0020). On a Redis Cluster one call per cluster slot
# (each message's register is on its own slot, {message_id}), in one pipeline that redis-py sends node by node.
CLAIM_SCRIPT = """
local out = {}
for i, key in ipairs(KEYS) do
  local done = redis.call('get', key)
  if done then
    out[i] = done
  else
    redis.call('set', key, ARGV[i], 'EX', ARGV[#ARGV])
    out[i] = ''
  end
end
return out
"""
_ERRORS = (RedisError, OSError, TimeoutError)


def result_key(namespace: str, message_id: str, generation: int) -> str:
    """The terminal register of one (message, generation): the agent's result cache key, on the message's Redis
    Cluster slot (`{message_id}` is its hash tag, shared by the agent's lease and retry cache)."""
    return f"{namespace}:result:{tag(message_id)}:{generation}"


@dataclass(frozen=True, slots=True)
class Terminal:
    """A terminal receipt a writer is about to publish (`receipt` is its framed Avro bytes)."""

    message_id: str
    generation: int
    receipt: bytes


class SlotStore(Protocol):
    """Where the registers live; both calls raise (RedisError, OSError) when the store is unreachable."""

    def claim(self, terminals: Sequence[Terminal]) -> list[bytes | None]:
        """Per terminal: None when its claim won (its receipt is stored now), else the winner's receipt bytes."""
        ...

    def peek(self, slots: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """Per (message_id, generation): the winner's receipt bytes, None while nobody ended it."""
        ...


class RedisSlots:
    """The registers in Redis: one round trip per call, whatever the number of terminals."""

    def __init__(self, client: SyncRedis, *, namespace: str, ttl_s: int = DEFAULT_TTL_S) -> None:
        self._redis = client
        self._ns = namespace
        self._ttl = str(ttl_s)
        self._script = client.register_script(CLAIM_SCRIPT)
        self._per_slot = not isinstance(client, redis.Redis)  # a cluster: one script call per slot

    @classmethod
    def from_url(cls, url: str, *, namespace: str, ttl_s: int = DEFAULT_TTL_S) -> RedisSlots:
        client = sync_client(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
        return cls(client, namespace=namespace, ttl_s=ttl_s)

    def claim(self, terminals: Sequence[Terminal]) -> list[bytes | None]:
        if not terminals:
            return []
        keys = [result_key(self._ns, t.message_id, t.generation) for t in terminals]
        receipts = [t.receipt for t in terminals]
        if not self._per_slot:
            # redis-py loads the script again when Redis restarted or was flushed (NOSCRIPT)
            found: list[Any] = self._script(keys=keys, args=[*receipts, self._ttl])
            return [bytes(f) or None for f in found]
        groups = list(by_slot(keys).values())
        answers = self._per_slot_calls([([keys[i] for i in g], [*(receipts[i] for i in g), self._ttl]) for g in groups])
        out: list[bytes | None] = [None] * len(keys)
        for group, answer in zip(groups, answers, strict=True):
            for i, f in zip(group, answer, strict=True):
                out[i] = bytes(f) or None
        return out

    def _per_slot_calls(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """The script once per cluster slot, in one pipeline per node (redis-py's cluster pipeline refuses EVALSHA);
        a call a node refuses (NOSCRIPT after a restart or flush, MOVED while slots move) runs again through the
        cluster client, which loads the script on every primary and follows redirections."""
        assert isinstance(self._redis, redis.cluster.RedisCluster)
        nodes: dict[str, Any] = {}
        on_node: dict[str, list[int]] = {}
        for i, (keys, _) in enumerate(calls):
            node = self._redis.get_node_from_key(keys[0])
            nodes[node.name] = node
            on_node.setdefault(node.name, []).append(i)
        answers: list[Any] = [None] * len(calls)
        for name, positions in on_node.items():
            pipe = nodes[name].redis_connection.pipeline(transaction=False)
            for i in positions:
                keys, args = calls[i]
                pipe.evalsha(self._script.sha, len(keys), *keys, *args)
            for i, answer in zip(positions, pipe.execute(raise_on_error=False), strict=True):
                answers[i] = answer
        for i, answer in enumerate(answers):
            if isinstance(answer, Exception):
                keys, args = calls[i]
                answers[i] = self._script(keys=keys, args=args)
        return answers

    def peek(self, slots: Sequence[tuple[str, int]]) -> list[bytes | None]:
        if not slots:
            return []
        values = mget(self._redis, [result_key(self._ns, m, g) for m, g in slots])
        return [None if v is None else bytes(v) for v in values]


class MemorySlots:
    """The in-memory fake of the registers (unit tests); `down = True` makes every call fail like Redis would."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, int], bytes] = {}
        self.down = False
        self.calls = 0

    def claim(self, terminals: Sequence[Terminal]) -> list[bytes | None]:
        self._call()
        out: list[bytes | None] = []
        for t in terminals:
            out.append(self.values.get((t.message_id, t.generation)))
            self.values.setdefault((t.message_id, t.generation), t.receipt)
        return out

    def peek(self, slots: Sequence[tuple[str, int]]) -> list[bytes | None]:
        self._call()
        return [self.values.get(slot) for slot in slots]

    def _call(self) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("the fake Redis is down")


class Fence:
    """A writer's view of the registers; never raises and never blocks on a Redis that is out.

    `claim` returns, per terminal, the bytes to publish: its own receipt when it won (or the store is out), the
    winner's when it lost. `won` is False only for a lost claim: the writer then produces no side output of its
    own (no dead letter for a message that already COMPLETED). With `again` (a writer that may decide the same
    record twice: router, delay tiers, timekeeper), a winner that is the same ending (status and error code) is its
    own earlier decision for the record (its outputs failed, the record is read again): that claim counts as won,
    with the stored bytes, so its side output is written again (at least once; replay is idempotent)."""

    def __init__(self, slots: SlotStore | None, *, writer: str, log_every_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._slots = slots
        self._writer = writer
        self._outage = Outage(clock=clock)
        self._log_every_s = log_every_s
        self._clock = clock
        self._logged_at: float | None = None
        self._since_log = 0
        self.lost = 0
        self.unfenced = 0

    @property
    def enabled(self) -> bool:
        return self._slots is not None

    def claim(self, terminals: Sequence[Terminal], *, again: bool = False) -> list[Claimed]:
        """One round trip for the whole batch (none when it is empty or the store is out)."""
        # an empty message_id (a decodable envelope that is faulty) names no message: never one shared slot
        asked = [i for i, t in enumerate(terminals) if t.message_id]
        found = self._call(lambda slots: slots.claim([terminals[i] for i in asked]), len(asked)) if asked else None
        winners = {i: f for i, f in zip(asked, found or (), strict=False)
                   if f is not None and not (again and same_ending(terminals[i].receipt, f))}  # decoded only if lost
        own = {i: f for i, f in zip(asked, found or (), strict=False) if f is not None and i not in winners}
        self.lost += len(winners)
        return [Claimed(winners[i], won=False) if i in winners else Claimed(own.get(i, t.receipt), won=True)
                for i, t in enumerate(terminals)]

    def claim_once(self, endings: Sequence[tuple[Position, Terminal | None]],
                   won: dict[Position, bytes]) -> list[Claimed | None]:
        """The claims of a writer that may end one record twice in a round (router batch, timekeeper tick): one
        round trip for every ending (`again`, see `claim`) except those of a position already in `won` (it won
        this round, then its side output was refused for good): that position keeps its stored receipt, never a
        second, different one. Records each won claim in `won`; None for an ending without a terminal."""
        ask = [i for i, (position, terminal) in enumerate(endings) if terminal is not None and position not in won]
        claims = dict(zip(ask, self.claim([cast(Terminal, endings[i][1]) for i in ask], again=True), strict=True))
        out: list[Claimed | None] = []
        for i, (position, _) in enumerate(endings):
            claim = claims.get(i)
            if claim is None and position in won:
                claim = Claimed(won[position], won=True)
            if claim is not None and claim.won:
                won[position] = claim.receipt
            out.append(claim)
        return out

    def peek(self, slots: Sequence[tuple[str, int]]) -> list[bytes | None]:
        """The winners of these slots; None for a slot nobody ended, and for every slot while the store is out."""
        if not slots:
            return []
        found = self._call(lambda store: store.peek(slots), 0)
        return [None] * len(slots) if found is None else found

    def _call(self, call: Callable[[SlotStore], list[bytes | None]], terminals: int) -> list[bytes | None] | None:
        slots = self._slots
        if slots is None or not self._outage.available():
            self._unfenced(terminals, None)
            return None
        try:
            found = call(slots)
        except _ERRORS as exc:
            self._outage.failed()
            self._unfenced(terminals, exc)
            return None
        if self._outage.down:
            log.warning("%s: Redis answers again; terminal receipts are fenced again", self._writer)
        self._outage.recovered()
        return found

    def _unfenced(self, terminals: int, exc: BaseException | None) -> None:
        """Availability first: the writer publishes its own terminal; counted, and logged once per interval."""
        self.unfenced += terminals
        self._since_log += terminals
        now = self._clock()
        if self._logged_at is not None and (self._slots is None or now - self._logged_at < self._log_every_s):
            return  # without Redis configured it is said once; an outage once per interval
        self._logged_at = now
        why = ("no Redis is configured (REACH_REDIS_URL)" if self._slots is None
               else f"Redis is unreachable ({exc or 'backing off'})")
        log.warning("%s: %s; %d terminal receipt(s) published without the first-terminal-wins fence (a second, "
                    "different terminal for a message is possible until it answers)", self._writer, why,
                    self._since_log)
        self._since_log = 0


def same_ending(ours: bytes, winner: bytes) -> bool:
    """Whether the stored winner ends the message as `ours` would (same status, same error code): identical but
    for `at`, it is the writer's own earlier decision for this record, not another writer's ending."""
    if ours == winner:
        return True
    try:
        mine, first = codec.decode(ours, Receipt), codec.decode(winner, Receipt)
    except Exception:  # noqa: BLE001 - an unreadable winner is someone else's ending: republished as it is
        return False
    return mine.status is first.status and (mine.error and mine.error.code) == (first.error and first.error.code)


@dataclass(frozen=True, slots=True)
class Claimed:
    """The receipt bytes a writer publishes, and whether they are its own (won) or the winner's."""

    receipt: bytes
    won: bool


def fence_from_settings(writer: str, *, namespace: str, redis_settings: RedisSettings) -> Fence:
    """The fence on the agents' Redis (REACH_REDIS_URL, REACH_TERMINAL_TTL); without a Redis configured, an open
    fence (said once in the log): the writer still ends messages, unfenced."""
    settings = redis_settings
    try:
        url = settings.url()
    except InfraUnavailable:
        return Fence(None, writer=writer)
    return Fence(RedisSlots.from_url(url, namespace=namespace, ttl_s=settings.terminal_ttl), writer=writer)
