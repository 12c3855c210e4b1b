"""Redis leases on (message_id, generation) and caches of what a run produced, so a redelivery never reruns;
and business idempotency: envelopes sharing an `idempotency_key` (per tenant and capability, within a window)
run the handler once, the others get the COMPLETED result of the one that ran."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

from reach.kafka.headers import Headers
from reach.redisbatch import ScriptBatcher
from reach.retry import Outgoing
from reach.terminals import result_key

# One round trip per message: the terminal result (with this attempt's cached records: a dead letter ends with it),
# this attempt's cached retry, else the lease (SET NX PX).
# With a business key (KEYS[4] its runner = a message_id, KEYS[5] its COMPLETED receipt): a result of the key is
# reused, a key run by another message is waited for; taking the lease marks the key as ours until ARGV[4] ms.
_CLAIM = """
local done = redis.call('get', KEYS[2])
if done then return {'result', done, redis.call('get', KEYS[3]) or ''} end
local again = redis.call('get', KEYS[3])
if again then return {'retry', again} end
if #KEYS >= 5 then
  local first = redis.call('get', KEYS[5])
  if first then return {'reused', first} end
  local runner = redis.call('get', KEYS[4])
  if runner and runner ~= ARGV[3] then return {'keyheld', runner} end
end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if #KEYS >= 5 then redis.call('set', KEYS[4], ARGV[3], 'PX', ARGV[4]) end
  return {'ours', ''}
end
return {'held', redis.call('get', KEYS[1]) or '?'}
"""
# Renewal re-takes a lease that vanished (Redis restarted or was flushed) as long as nobody else took it.
_RENEW = """
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end
if not holder then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) and 1 or 0 end
return 0
"""
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
# A terminal outcome, first one wins (reach.terminals): cache the receipt unless the message was already ended
# (by the router, the timekeeper or another run: that winner is returned and published instead), and drop our
# lease in one round trip (a claim finds the result first). With a business key: a COMPLETED run (ARGV[5] = 1)
# keeps its receipt for the key's window (ARGV[6] ms) even when another ending won the message's register: the
# key tracks the side effect, which happened (a retry of an EXPIRED message reuses it rather than repeating it);
# unless the key holds a result already (another run of this message that won). Any other ending frees the key
# (only a COMPLETED result is reused, so the next envelope with the key runs again).
_FINISH = """
local done = redis.call('get', KEYS[2])
if not done then redis.call('set', KEYS[2], ARGV[2], 'EX', ARGV[3]) end
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
if #KEYS >= 4 then
  if ARGV[5] == '1' then
    if not done then redis.call('set', KEYS[4], ARGV[2], 'PX', ARGV[6])
    else redis.call('set', KEYS[4], ARGV[2], 'NX', 'PX', ARGV[6]) end
  end
  if redis.call('get', KEYS[3]) == ARGV[4] then redis.call('del', KEYS[3]) end
end
return done
"""
_SET = "return redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2])"


DEFAULT_IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class KeyScope:
    """A business idempotency key as it is scoped: per tenant and capability, for `window_ms` after a COMPLETED
    run; `hold_ms` is how long a run marks the key as taken (until the envelope's deadline, at least a lease)."""

    tenant: str
    capability: str
    key: str
    window_ms: int = DEFAULT_IDEMPOTENCY_WINDOW_MS
    hold_ms: int = 60_000

    @property
    def digest(self) -> str:
        """A fixed-length name for the key: tenant, capability and key are untrusted text of any length."""
        return hashlib.sha256(json.dumps([self.tenant, self.capability, self.key]).encode()).hexdigest()


@dataclass(frozen=True)
class Claim:
    """What a claim found: a cached terminal receipt (with `retry`, the records this attempt ended it with), this
    attempt's cached records, another holder, the COMPLETED receipt of another message with the same business key
    (`reused`), a message running that key (`key_holder`), or ours."""

    result: bytes | None = None
    retry: tuple[Outgoing, ...] | None = None
    holder: str | None = None
    reused: bytes | None = None
    key_holder: str | None = None

    @property
    def ours(self) -> bool:
        return (self.result is None and self.retry is None and self.holder is None and self.reused is None
                and self.key_holder is None)


class LeaseStore(Protocol):
    """The SDK's view of Redis; every method may raise (RedisError, OSError) when Redis is unreachable."""

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int,
                    scope: KeyScope | None = None) -> Claim: ...

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool: ...

    async def release(self, message_id: str, generation: int) -> None: ...

    async def finish(self, message_id: str, generation: int, receipt: bytes, *, scope: KeyScope | None = None,
                     completed: bool = False) -> bytes | None: ...

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None: ...


class Leases:
    """`<ns>:lease:<id>:<gen>` (owner = instance id), `<ns>:result:<id>:<gen>`, `<ns>:retry:<id>:<gen>:<attempt>`.

    Every call is a Lua script, and the calls made in one turn of the event loop go to Redis as one pipeline:
    under load a batch of messages costs one round trip per step, not one per message and step."""

    def __init__(self, redis: Redis, *, namespace: str, owner: str, result_ttl_s: int) -> None:
        self._ns = namespace
        self._owner = owner
        self._result_ttl_s = result_ttl_s
        batcher = ScriptBatcher.on(redis)  # one pipeline for all five scripts' calls of a loop turn
        self._claim = batcher.script(_CLAIM)
        self._renew = batcher.script(_RENEW)
        self._release = batcher.script(_RELEASE)
        self._finish = batcher.script(_FINISH)
        self._set = batcher.script(_SET)

    def lease_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:lease:{message_id}:{generation}"

    def result_key(self, message_id: str, generation: int) -> str:
        return result_key(self._ns, message_id, generation)  # the terminal register every writer claims

    def retry_key(self, message_id: str, generation: int, attempt: int) -> str:
        return f"{self._ns}:retry:{message_id}:{generation}:{attempt}"

    def key_keys(self, scope: KeyScope) -> list[str]:
        """The business key's runner (a message_id) and its COMPLETED receipt."""
        return [f"{self._ns}:idem:{scope.digest}:run", f"{self._ns}:idem:{scope.digest}:done"]

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int,
                    scope: KeyScope | None = None) -> Claim:
        """Check the caches (and the business key's) and take the lease, atomically and in one round trip."""
        keys = [self.lease_key(message_id, generation), self.result_key(message_id, generation),
                self.retry_key(message_id, generation, attempt)]
        args: list[str | bytes] = [self._owner, str(ttl_ms)]
        if scope is not None:
            keys += self.key_keys(scope)
            args += [message_id, str(max(ttl_ms, scope.hold_ms))]
        kind, value, *extra = await self._claim(keys, args)
        if kind == b"result":
            return Claim(result=value, retry=_ending_with(extra[0] if extra else b"", value))
        if kind == b"retry":
            return Claim(retry=decode_records(value))
        if kind == b"held":
            return Claim(holder=value.decode(errors="replace"))
        if kind == b"reused":
            return Claim(reused=value)
        if kind == b"keyheld":
            return Claim(key_holder=value.decode(errors="replace"))
        return Claim()

    async def renew(self, message_id: str, generation: int, ttl_ms: int) -> bool:
        """Extend our lease (re-taking it if it vanished); False when someone else holds it now."""
        return bool(await self._renew([self.lease_key(message_id, generation)], [self._owner, str(ttl_ms)]))

    async def release(self, message_id: str, generation: int) -> None:
        """Drop our lease (only ours), so a retry or another instance may claim it at once."""
        await self._release([self.lease_key(message_id, generation)], [self._owner])

    async def finish(self, message_id: str, generation: int, receipt: bytes, *, scope: KeyScope | None = None,
                     completed: bool = False) -> bytes | None:
        """Cache a terminal receipt for `result_ttl_s` unless the message already ended, and drop our lease; done
        before the receipt is published. Returns None when ours is the terminal, else the winner's receipt bytes.
        With a business key: a COMPLETED receipt is kept for the key's window (won or not: the side effect
        happened), any other ending frees the key."""
        keys = [self.lease_key(message_id, generation), self.result_key(message_id, generation)]
        args: list[str | bytes] = [self._owner, receipt, str(self._result_ttl_s)]
        if scope is not None:
            keys += self.key_keys(scope)
            args += [message_id, "1" if completed else "0", str(scope.window_ms)]
        winner = await self._finish(keys, args)
        return None if winner is None else bytes(winner)

    async def store_retry(self, message_id: str, generation: int, attempt: int,
                          records: tuple[Outgoing, ...]) -> None:
        """Cache what a failed attempt produced (retry or dead letter, and its receipt); written before them."""
        await self._set([self.retry_key(message_id, generation, attempt)],
                         [encode_records(records), str(self._result_ttl_s)])


def _ending_with(cached: bytes, result: bytes) -> tuple[Outgoing, ...] | None:
    """This attempt's cached records when they end with the terminal result (a dead letter, then its receipt: a
    crash after the claim republishes the letter too), else None (the result alone is republished)."""
    if not cached:
        return None
    records = decode_records(cached)
    return records if records and records[-1].value == result else None


def encode_records(records: tuple[Outgoing, ...]) -> bytes:
    """Records as JSON (bytes in base64), for the retry cache."""
    def b64(data: str | bytes | None) -> str | None:
        if isinstance(data, str):
            data = data.encode()
        return None if data is None else base64.b64encode(data).decode()

    return json.dumps([{"topic": r.topic, "key": r.key, "value": b64(r.value),
                        "headers": [[k, b64(v)] for k, v in r.headers]} for r in records]).encode()


def decode_records(data: bytes) -> tuple[Outgoing, ...]:
    """The inverse of `encode_records`."""
    def raw(text: str | None) -> bytes | None:
        return None if text is None else base64.b64decode(text)

    out = []
    for item in json.loads(data):
        headers: Headers = [(k, raw(v) or b"") for k, v in item["headers"]]
        out.append(Outgoing(topic=item["topic"], key=item["key"], value=raw(item["value"]), headers=headers))
    return tuple(out)
