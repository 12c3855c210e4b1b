"""The agent pipeline's own work per message, in process: no broker, no Redis, no threads.

Envelopes are read from their bytes (reach.agent.inbox.read, as the runner reads them) and handed to
`Pipeline.process` in batches of B, a task per message as the runner starts them; the Lua scripts' pipeline is
answered by a stub on the next loop turn (every claim is ours, every ending wins), and every record is acknowledged
at once. It prints the CPU time per message, which a shared machine inflates; for a figure that does not move with
the load, count instructions with valgrind and take the difference of two sizes (startup cancels out):

    valgrind --tool=callgrind --callgrind-out-file=/dev/null python scripts/agent_inproc_cost.py --batch 4 -n 200
    valgrind --tool=callgrind --callgrind-out-file=/dev/null python scripts/agent_inproc_cost.py --batch 4 -n 700
    # (refs at 700 - refs at 200) / 500 = instructions per message

`--src DIR` runs another source tree (a checkout of the code before a change) with the same driver."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="messages handed to the pipeline at once")
    parser.add_argument("-n", "--messages", type=int, default=5_000)
    parser.add_argument("--src", type=Path, default=None, help="run this source tree's pipeline")
    args = parser.parse_args()
    sys.path.insert(0, str((args.src or ROOT).resolve()))

    from fakeredis import FakeAsyncRedis

    from reach.agent import Agent, inbox
    from reach.agent.idempotency import Leases
    from reach.agent.pipeline import Pipeline
    from reach.envelopes import new_envelope
    from reach.kafka import codec
    from reach.names import Names

    class Acked:
        def send(self, topic: str, key: str, value: bytes | None, *, headers: Any = None,
                 partition: int | None = None) -> Future[Any]:
            future: Future[Any] = Future()
            future.set_result(None)
            return future

    async def answered(calls: Sequence[tuple[str, Sequence[str], Sequence[Any]]]) -> list[Any]:
        await asyncio.sleep(0)  # the answer comes on a later turn, as Redis's does
        return [[b"ours", b""] if len(keys) == 3 else None for _sha, keys, _args in calls]  # claim: ours; finish: won

    # a grace far longer than any run here: no STARTED, however slowly the process runs (under valgrind, on a busy
    # machine, a run could outlast 50 ms of wall time and send one, which would make the count follow the load)
    agent = Agent("agent://bench/inproc", instance_id="i-1", started_grace_ms=60_000)

    @agent.capability("bench.inproc", version="1.0.0", input_schema={"type": "object"})
    async def noop(payload: Any) -> dict[str, bool]:
        return {"ok": True}

    leases = Leases(FakeAsyncRedis(), namespace="ns", owner="i-1", result_ttl_s=60)
    leases._claim.batcher._run = answered  # type: ignore[method-assign]  # noqa: SLF001 - every script shares it
    pipe = Pipeline(agent, publisher=Acked(), leases=leases, receipts_topic=Names("ns").receipts,
                    executor=ThreadPoolExecutor(1), middleware=[])
    records = [codec.encode(new_envelope("bench.inproc", {"n": i})) for i in range(args.messages)]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        left, done, tasks = [len(records)], asyncio.Event(), set()

        def finished(task: asyncio.Task[Any]) -> None:
            tasks.discard(task)
            task.result()
            left[0] -= 1
            if not left[0]:
                done.set()

        def start(batch: list[bytes]) -> None:
            for raw in batch:
                envelope = inbox.read(raw, [])
                task = loop.create_task(pipe.process(envelope, [], raw=raw, origin=("ns.inbox", 0, 0)))  # type: ignore[arg-type]
                tasks.add(task)
                task.add_done_callback(finished)

        for i in range(0, len(records), args.batch):
            loop.call_soon(start, records[i:i + args.batch])
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        await done.wait()

    began = time.process_time()
    asyncio.run(run())
    print(f"batch {args.batch}: {(time.process_time() - began) / len(records) * 1e6:.1f} µs CPU per message "
          f"({len(records)} messages)")


if __name__ == "__main__":
    main()
