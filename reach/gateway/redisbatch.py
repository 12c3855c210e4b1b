"""One Lua script called by many requests: the calls made in one turn of the event loop go as one pipeline.

Under load the gateway has many requests between two turns of its loop; one pipelined round trip for all
their quota calls costs one write and one read instead of one each, and each request waits on one future
instead of redis-py's connection checkout, send and parse steps (docs/decisions/0014-gateway-throughput.md)."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

Call = tuple[list[str], list[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """`await batch(keys, args)` is EVALSHA of `script`; a NOSCRIPT (Redis restarted) loads it and runs again."""

    def __init__(self, client: Redis, script: str) -> None:
        self._client = client
        self._script = client.register_script(script)
        self._queue: list[Call] = []
        self._flushes: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    def __call__(self, keys: list[str], args: list[Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            loop.call_soon(self._start_flush)
        self._queue.append((keys, args, future))
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
            if missing:
                await self._client.script_load(self._script.script)
                for i, result in zip(missing, await self._evalsha([batch[i] for i in missing]), strict=True):
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

    async def _evalsha(self, batch: list[Call]) -> list[Any]:
        """One pipeline of EVALSHA (without redis-py's per-pipeline SCRIPT EXISTS round trip)."""
        async with self._client.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                pipe.evalsha(self._script.sha, len(keys), *keys, *args)
            return list(await pipe.execute(raise_on_error=False))
