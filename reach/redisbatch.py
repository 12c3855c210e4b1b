"""Lua scripts called by many coroutines: the calls made in one turn of the event loop go as one pipeline.

Under load the gateway has many requests, and an agent many messages, between two turns of its loop; one pipelined
round trip for all their script calls costs one write and one read instead of one each, and each caller waits on
one future instead of redis-py's connection checkout, send and parse steps (docs/decisions/0014-gateway-throughput.md).
The gateway's quotas and the agent's leases both batch through here; it imports neither of them."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio.cluster import PipelineCommand, RedisCluster
from redis.exceptions import NoScriptError

from reach.redisclient import AsyncRedis

Arg = str | bytes | int | float
Pending = tuple["Script", Sequence[str], Sequence[Arg], "asyncio.Future[Any]"]
Run = Callable[[Sequence[tuple[str, Sequence[str], Sequence[Arg]]]], Awaitable[list[Any]]]
"""One pipeline of EVALSHA (sha, keys, args): per call its result, or the error Redis answered it with."""
Load = Callable[[str], Awaitable[object]]
"""SCRIPT LOAD of a script's source."""


@dataclass(frozen=True, eq=False)
class Script:
    """A Lua script bound to a batcher: `await script(keys, args)` is its EVALSHA, in the current turn's pipeline."""

    source: str
    batcher: ScriptBatcher = field(repr=False)
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode()).hexdigest())  # noqa: S324 - Redis's name

    def __call__(self, keys: Sequence[str], args: Sequence[Arg]) -> asyncio.Future[Any]:
        return self.batcher.call(self, keys, args)


class ScriptBatcher:
    """Queues script calls and sends them as one pipeline on the next turn of the loop; a NOSCRIPT answer (Redis
    restarted or was flushed) loads the scripts it names and runs those calls again. Each caller gets its own
    result or error; when the pipeline itself fails (Redis unreachable) every caller of the batch gets that error."""

    def __init__(self, *, run: Run, load: Load) -> None:
        self._run = run
        self._load = load
        self._queue: list[Pending] = []
        self._flushes: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    @classmethod
    def on(cls, client: AsyncRedis) -> ScriptBatcher:
        """A batcher on a redis.asyncio client, one node or a cluster: a cluster's pipeline sends each call to its
        slot's node (every script's keys share a slot, reach.redisclient), and SCRIPT LOAD goes to every primary."""
        async def load(source: str) -> object:
            return await client.script_load(source)  # on a cluster: every primary

        if isinstance(client, RedisCluster):
            return cls(run=_on_cluster(client), load=load)

        async def run(calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]) -> list[Any]:
            # EVALSHA itself, without redis-py's per-pipeline SCRIPT EXISTS round trip
            async with client.pipeline(transaction=False) as pipe:
                for sha, keys, args in calls:
                    pipe.evalsha(sha, len(keys), *keys, *args)
                return list(await pipe.execute(raise_on_error=False))

        return cls(run=run, load=load)

    def script(self, source: str) -> Script:
        return Script(source, self)

    def call(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._start_flush)
        self._queue.append((script, keys, args, future))
        return future

    def _start_flush(self) -> None:
        task = asyncio.get_running_loop().create_task(self._flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self) -> None:
        batch, self._queue = self._queue, []
        try:
            results = await self._evalsha(batch)
            missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
            if missing:  # Redis restarted or was flushed: load the scripts, run those calls again
                for script in {batch[i][0].sha: batch[i][0] for i in missing}.values():
                    await self._load(script.source)
                again = await self._evalsha([batch[i] for i in missing])
                for i, result in zip(missing, again, strict=True):
                    results[i] = result
        except Exception as exc:  # noqa: BLE001 - Redis unreachable: every caller of the batch gets the error
            results = [exc] * len(batch)
        for (*_, future), result in zip(batch, results, strict=True):
            if future.done():
                continue
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _evalsha(self, batch: list[Pending]) -> list[Any]:
        results = await self._run([(script.sha, keys, args) for script, keys, args, _ in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"a pipeline of {len(batch)} script calls answered {len(results)} results")
        return results


def _on_cluster(client: RedisCluster) -> Run:
    """One pipeline per node, the nodes at once: redis-py's cluster pipeline refuses EVALSHA, so the calls are
    grouped by the node that owns their slot (every script's keys share one) and sent on that node's connection.
    A call a node refuses for where its slot lives (MOVED / ASK while slots move, a node just failed over) runs
    again alone through the cluster client, which follows the redirection; NOSCRIPT is left to the batcher."""
    async def run(calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]) -> list[Any]:
        await client.initialize()  # the slot map (a no-op once known)
        on_node: dict[str, tuple[Any, list[PipelineCommand]]] = {}
        for i, (sha, keys, args) in enumerate(calls):
            node = (client.get_node_from_key(keys[0]) if keys else None) or client.get_random_node()
            on_node.setdefault(node.name, (node, []))[1].append(PipelineCommand(i, "EVALSHA", sha, len(keys),
                                                                                *keys, *args))
        await asyncio.gather(*(node.execute_pipeline(commands) for node, commands in on_node.values()))
        results: list[Any] = [None] * len(calls)
        for _, commands in on_node.values():
            for command in commands:
                results[command.position] = command.result
        for i, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, NoScriptError):
                sha, keys, args = calls[i]
                try:
                    results[i] = await client.evalsha(sha, len(keys), *keys, *args)
                except Exception as exc:  # noqa: BLE001 - that caller gets its error
                    results[i] = exc
        return results

    return run
