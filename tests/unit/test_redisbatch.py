"""reach.redisbatch: script calls of one loop turn go as one pipeline; NOSCRIPT reloads and reruns; each caller
gets its own result or error. Run on an in-memory Redis (the batcher's run/load seam), no server."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from reach.redisbatch import Arg, ScriptBatcher

ECHO = "return ARGV[1]"
KEYS = "return KEYS[1]"
FAILS = "return redis.error_reply('no')"


class MemoryRedis:
    """EVALSHA of the scripts it has loaded (a Python stand-in per source); every pipeline and load is recorded."""

    BEHAVIOUR: dict[str, Callable[[Sequence[str], Sequence[Arg]], Any]] = {
        ECHO: lambda keys, args: args[0], KEYS: lambda keys, args: keys[0],
        FAILS: lambda keys, args: ResponseError("no"),
    }

    def __init__(self, loaded: Sequence[str] = ()) -> None:
        self.scripts = {hashlib.sha1(s.encode()).hexdigest(): s for s in loaded}  # noqa: S324
        self.pipelines: list[int] = []
        self.loads: list[str] = []
        self.down: Exception | None = None
        self.load_error: Exception | None = None
        self.short = False

    async def run(self, calls: Sequence[tuple[str, Sequence[str], Sequence[Arg]]]) -> list[Any]:
        if self.down:
            raise self.down
        self.pipelines.append(len(calls))
        out = [self.BEHAVIOUR[self.scripts[sha]](keys, args) if sha in self.scripts
               else NoScriptError("NOSCRIPT No matching script.") for sha, keys, args in calls]
        return out[:-1] if self.short else out

    async def load(self, source: str) -> object:
        if self.load_error:
            raise self.load_error
        self.loads.append(source)
        sha = hashlib.sha1(source.encode()).hexdigest()  # noqa: S324
        self.scripts[sha] = source
        return sha


def batcher_on(redis: MemoryRedis) -> ScriptBatcher:
    return ScriptBatcher(run=redis.run, load=redis.load)


async def settled(*calls: asyncio.Future[Any]) -> list[Any]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


def in_one_turn(make: Callable[[], list[asyncio.Future[Any]]]) -> list[Any]:
    """Make the calls inside a running loop, in one turn of it, and return what each caller got."""
    async def main() -> list[Any]:
        return await settled(*make())
    return asyncio.run(main())


def test_the_calls_of_one_loop_turn_go_as_one_pipeline_each_caller_getting_its_own_result() -> None:
    redis = MemoryRedis(loaded=[ECHO, KEYS])
    batcher = batcher_on(redis)
    echo, key = batcher.script(ECHO), batcher.script(KEYS)

    async def two_turns() -> tuple[list[Any], list[Any]]:
        first = await settled(*(echo([], [f"v{i}"]) for i in range(3)), key(["k"], []))
        return first, await settled(echo([], ["again"]))

    assert asyncio.run(two_turns()) == (["v0", "v1", "v2", "k"], ["again"])
    assert redis.pipelines == [4, 1]


def test_a_script_redis_lost_is_loaded_once_and_only_its_calls_run_again() -> None:
    redis = MemoryRedis(loaded=[KEYS])  # as after a restart that kept one script (or a fresh one)
    batcher = batcher_on(redis)
    echo, key = batcher.script(ECHO), batcher.script(KEYS)

    assert in_one_turn(lambda: [echo([], ["a"]), key(["k"], []), echo([], ["b"])]) == ["a", "k", "b"]
    assert redis.loads == [ECHO]
    assert redis.pipelines == [3, 2], "the NOSCRIPT calls alone run again"


def test_a_scripts_error_goes_to_its_caller_alone() -> None:
    redis = MemoryRedis(loaded=[ECHO, FAILS])
    batcher = batcher_on(redis)
    echo, fails = batcher.script(ECHO), batcher.script(FAILS)

    ok, failed = in_one_turn(lambda: [echo([], ["a"]), fails([], [])])
    assert ok == "a"
    assert isinstance(failed, ResponseError)


def test_when_redis_is_unreachable_every_caller_of_the_batch_gets_the_error_and_the_next_batch_runs() -> None:
    redis = MemoryRedis(loaded=[ECHO])
    redis.down = RedisConnectionError("Connection refused")
    echo = batcher_on(redis).script(ECHO)

    async def down_then_up() -> tuple[list[Any], Any]:
        during = await settled(echo([], ["a"]), echo([], ["b"]))
        redis.down = None
        return during, await echo([], ["c"])

    during, after = asyncio.run(down_then_up())
    assert [type(e) for e in during] == [RedisConnectionError, RedisConnectionError]
    assert after == "c"


def test_a_failed_reload_fails_the_whole_batch() -> None:
    redis = MemoryRedis(loaded=[KEYS])
    redis.load_error = RedisConnectionError("gone while loading")
    batcher = batcher_on(redis)

    results = in_one_turn(lambda: [batcher.script(ECHO)([], ["a"]), batcher.script(KEYS)(["k"], [])])
    assert [str(e) for e in results] == ["gone while loading"] * 2


def test_a_pipeline_answering_too_few_results_fails_every_caller_rather_than_misattributing() -> None:
    redis = MemoryRedis(loaded=[ECHO])
    redis.short = True
    echo = batcher_on(redis).script(ECHO)

    results = in_one_turn(lambda: [echo([], ["a"]), echo([], ["b"])])
    assert all(isinstance(e, RuntimeError) and "2 script calls answered 1" in str(e) for e in results)


def test_a_caller_that_gave_up_does_not_disturb_the_others() -> None:
    redis = MemoryRedis(loaded=[ECHO])
    echo = batcher_on(redis).script(ECHO)

    async def one_cancelled() -> list[Any]:
        gone, kept = echo([], ["a"]), echo([], ["b"])
        gone.cancel()
        return await settled(gone, kept)

    gone, kept = asyncio.run(one_cancelled())
    assert isinstance(gone, asyncio.CancelledError) and kept == "b"


def test_a_script_is_named_by_its_sha1_as_redis_names_it() -> None:
    script = batcher_on(MemoryRedis()).script(ECHO)
    assert script.sha == hashlib.sha1(ECHO.encode()).hexdigest()  # noqa: S324


def test_a_call_outside_an_event_loop_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no running event loop"):
        batcher_on(MemoryRedis()).script(ECHO)([], ["a"])
