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


class FakeNode:
    """A cluster node: answers each pipelined EVALSHA with `answer(keys)`, recording the pipelines it got."""

    def __init__(self, name: str, answer: Callable[[list[str]], Any]) -> None:
        self.name = name
        self.answer = answer
        self.pipelines: list[list[str]] = []

    async def execute_pipeline(self, commands: list[Any]) -> bool:
        self.pipelines.append([c.args[3] for c in commands])  # EVALSHA sha numkeys key...
        for command in commands:
            command.result = self.answer(list(command.args[3:3 + command.args[2]]))
        return False


class FakeCluster:
    """The parts of redis.asyncio.cluster.RedisCluster the batcher uses; a key's node is its first letter's."""

    def __init__(self, nodes: dict[str, FakeNode], redirected: Callable[[list[str]], Any]) -> None:
        self.nodes = nodes
        self.redirected = redirected
        self.evalshas: list[list[str]] = []

    async def initialize(self) -> FakeCluster:
        return self

    def get_node_from_key(self, key: str) -> FakeNode:
        return self.nodes[key[0]]

    def get_random_node(self) -> FakeNode:
        return next(iter(self.nodes.values()))

    async def evalsha(self, sha: str, numkeys: int, *keys_and_args: Any) -> Any:
        keys = list(keys_and_args[:numkeys])
        self.evalshas.append(keys)
        answer = self.redirected(keys)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_on_a_cluster_each_node_gets_one_pipeline_and_redirections_run_again_through_the_client() -> None:
    from redis.exceptions import MovedError

    from reach.redisbatch import _on_cluster

    def node_answer(keys: list[str]) -> Any:
        if keys[0] == "a-moved":
            return MovedError("3999 127.0.0.1:7002")
        if keys[0] == "b-noscript":
            return NoScriptError("NOSCRIPT No matching script.")
        if keys[0] == "b-moved-down":
            return MovedError("12 127.0.0.1:7003")
        return f"ran {keys[0]}"

    def redirected(keys: list[str]) -> Any:
        return RedisConnectionError("the new owner is down") if keys[0] == "b-moved-down" else f"followed {keys[0]}"

    nodes = {"a": FakeNode("n1", node_answer), "b": FakeNode("n2", node_answer)}
    cluster = FakeCluster(nodes, redirected)
    run = _on_cluster(cluster)  # type: ignore[arg-type]
    keys = ["a1", "b1", "a-moved", "b-noscript", "a2", "b-moved-down"]
    results = asyncio.run(run([("sha", [k], ["x"]) for k in keys]))
    assert nodes["a"].pipelines == [["a1", "a-moved", "a2"]] and nodes["b"].pipelines == [["b1", "b-noscript",
                                                                                            "b-moved-down"]]
    assert results[:3] == ["ran a1", "ran b1", "followed a-moved"]
    assert isinstance(results[3], NoScriptError), "NOSCRIPT is the batcher's: it loads the script and runs again"
    assert results[4] == "ran a2"
    assert isinstance(results[5], RedisConnectionError), "a redirected call that fails gives its caller the error"
    assert cluster.evalshas == [["a-moved"], ["b-moved-down"]]
