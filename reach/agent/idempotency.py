"""Redis leases on (message_id, generation) and caches of what a run produced, so a redelivery never reruns;
and business idempotency: envelopes sharing an `idempotency_key` (per tenant and capability, within a window)
run the handler once, the others get the COMPLETED result of the one that ran."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Protocol

from reach.failures import Outgoing
from reach.kafka.headers import Headers
from reach.redisbatch import ScriptBatcher
from reach.redisclient import AsyncRedis, tag
from reach.terminals import result_key

# One round trip per message, every key on the message's slot ({message_id}): the terminal result (with this
# attempt's cached records: a dead letter ends with it), this attempt's cached retry, else the lease (SET NX PX).
_CLAIM = """
local done = redis.call('get', KEYS[2])
if done then return {'result', done, redis.call('get', KEYS[3]) or ''} end
local again = redis.call('get', KEYS[3])
if again then return {'retry', again} end
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'ours', ''} end
return {'held', redis.call('get', KEYS[1]) or '?'}
"""
# A business key (on the key's slot, {digest}), asked once the message's lease is ours: KEYS[1] its runner (a
# message_id), KEYS[2] its COMPLETED receipt. A result of the key is reused, a key run by another message is waited
# for (the caller then drops its lease); else the key is marked as run by this message until ARGV[2] ms.
_CLAIM_KEY = """
local first = redis.call('get', KEYS[2])
if first then return {'reused', first} end
local runner = redis.call('get', KEYS[1])
if runner and runner ~= ARGV[1] then return {'keyheld', runner} end
redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {'ours', ''}
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
# lease in one round trip (a claim finds the result first).
_FINISH = """
local done = redis.call('get', KEYS[2])
if not done then redis.call('set', KEYS[2], ARGV[2], 'EX', ARGV[3]) end
if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) end
return done
"""
# The business key's side of a terminal, written before the message's (_FINISH): a COMPLETED run (ARGV[2] = 1)
# keeps its receipt for the key's window (ARGV[4] ms) unless the key holds a result already, even when another
# ending then wins the message's register: the key tracks the side effect, which happened (a retry of an EXPIRED
# message reuses it rather than repeating it). Any other ending frees the key (only a COMPLETED result is reused,
# so the next envelope with the key runs again). Written first, a crash before _FINISH leaves the key's result for
# the redelivery to reuse, never a key that forgot its side effect.
_FINISH_KEY = """
if ARGV[2] == '1' then redis.call('set', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[4]) end
if redis.call('get', KEYS[1]) == ARGV[3] then redis.call('del', KEYS[1]) end
return 0
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

    async def restore_key(self, message_id: str, scope: KeyScope, receipt: bytes) -> None: ...


class Leases:
    """`<ns>:lease:{<id>}:<gen>` (owner = instance id), `<ns>:result:{<id>}:<gen>`,
    `<ns>:retry:{<id>}:<gen>:<attempt>`; a business key's `<ns>:idem:{<digest>}:run` and `:done`.

    The braces are hash tags: a message's keys share one Redis Cluster slot, a business key's two another, so each
    script runs on one node (reach.redisclient). Every call is a Lua script, and the calls made in one turn of the
    event loop go to Redis as one pipeline: under load a batch of messages costs one round trip per step, not one
    per message and step. A business key costs a second script on its own slot (claim: after the lease is ours;
    finish: before the message's register, see _FINISH_KEY)."""

    def __init__(self, redis: AsyncRedis, *, namespace: str, owner: str, result_ttl_s: int) -> None:
        self._ns = namespace
        self._owner = owner
        self._result_ttl_s = result_ttl_s
        batcher = ScriptBatcher.on(redis)  # one pipeline for all the scripts' calls of a loop turn
        self._claim = batcher.script(_CLAIM)
        self._claim_key = batcher.script(_CLAIM_KEY)
        self._renew = batcher.script(_RENEW)
        self._release = batcher.script(_RELEASE)
        self._finish = batcher.script(_FINISH)
        self._finish_key = batcher.script(_FINISH_KEY)
        self._set = batcher.script(_SET)

    def lease_key(self, message_id: str, generation: int) -> str:
        return f"{self._ns}:lease:{tag(message_id)}:{generation}"

    def result_key(self, message_id: str, generation: int) -> str:
        return result_key(self._ns, message_id, generation)  # the terminal register every writer claims

    def retry_key(self, message_id: str, generation: int, attempt: int) -> str:
        return f"{self._ns}:retry:{tag(message_id)}:{generation}:{attempt}"

    def key_keys(self, scope: KeyScope) -> list[str]:
        """The business key's runner (a message_id) and its COMPLETED receipt."""
        return [f"{self._ns}:idem:{tag(scope.digest)}:run", f"{self._ns}:idem:{tag(scope.digest)}:done"]

    def script_keys(self, message_id: str, generation: int, attempt: int,
                    scope: KeyScope | None = None) -> list[list[str]]:
        """The KEYS of every script call this store makes for one message (each list must share a slot)."""
        message = [self.lease_key(message_id, generation), self.result_key(message_id, generation),
                   self.retry_key(message_id, generation, attempt)]
        calls = [message, message[:1], message[:2], [message[2]]]
        return calls + ([self.key_keys(scope)] if scope is not None else [])

    async def claim(self, message_id: str, generation: int, attempt: int, ttl_ms: int,
                    scope: KeyScope | None = None) -> Claim:
        """Check the caches and take the lease, atomically and in one round trip; with a business key, then ask
        the key (a second round trip on its slot) and give the lease back when the key is reused or held."""
        keys = [self.lease_key(message_id, generation), self.result_key(message_id, generation),
                self.retry_key(message_id, generation, attempt)]
        kind, value, *extra = await self._claim(keys, [self._owner, str(ttl_ms)])
        if kind == b"result":
            return Claim(result=value, retry=_ending_with(extra[0] if extra else b"", value))
        if kind == b"retry":
            return Claim(retry=decode_records(value))
        if kind == b"held":
            return Claim(holder=value.decode(errors="replace"))
        if scope is None:
            return Claim()
        kind, value = await self._claim_key(self.key_keys(scope), [message_id, str(max(ttl_ms, scope.hold_ms))])
        if kind == b"ours":
            return Claim()
        await self.release(message_id, generation)  # not run here: the lease is free for whoever runs it
        if kind == b"reused":
            return Claim(reused=value)
        return Claim(key_holder=value.decode(errors="replace"))

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
        With a business key (first, on its slot): a COMPLETED receipt is kept for the key's window (won or not: the
        side effect happened), any other ending frees the key."""
        if scope is not None:
            await self._finish_key(self.key_keys(scope), [receipt, "1" if completed else "0", message_id,
                                                          str(scope.window_ms)])
        keys = [self.lease_key(message_id, generation), self.result_key(message_id, generation)]
        winner = await self._finish(keys, [self._owner, receipt, str(self._result_ttl_s)])
        return None if winner is None else bytes(winner)

    async def restore_key(self, message_id: str, scope: KeyScope, receipt: bytes) -> None:
        """Put back a key's COMPLETED receipt found on Kafka (reach.agent.keyledger) after Redis forgot it, and free
        the key from `message_id`, which claimed it before the ledger answered (the key's side of a finish)."""
        await self._finish_key(self.key_keys(scope), [receipt, "1", message_id, str(scope.window_ms)])

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
