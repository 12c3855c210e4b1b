"""Lease renewals share one loop timer per interval (reach.agent.pipeline.Renewals): each run still renews on its
own schedule until its renewal says no or the run ends."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from reach.agent.pipeline import Renewals


def test_each_run_renews_every_interval_until_told_to_stop_or_cancelled() -> None:
    calls = {"long": 0, "taken": 0, "short": 0, "other": 0}

    def renew(name: str, until: int) -> Callable[[], Awaitable[bool]]:
        async def once() -> bool:
            calls[name] += 1
            return calls[name] < until
        return once

    async def until(name: str, count: int) -> None:
        while calls[name] < count:
            await asyncio.sleep(0.005)

    async def scenario() -> dict[str, int]:
        renewals = Renewals()
        long = renewals.start(renew("long", 1_000), every_s=0.02)
        renewals.start(renew("taken", 2), every_s=0.02)  # its second renewal finds the lease taken: it stops
        short = renewals.start(renew("short", 1_000), every_s=0.02)
        other = renewals.start(renew("other", 1_000), every_s=0.03)  # another lease length: its own timer
        short.cancel()  # the run ended before its first renewal was due
        await asyncio.wait_for(asyncio.gather(until("long", 4), until("other", 2)), 30)
        assert calls["taken"] == 2, "a renewal that finds the lease taken is not queued again"
        long.cancel()
        other.cancel()
        before = dict(calls)
        await asyncio.sleep(0.1)
        assert calls == before, "a cancelled renewal never renews again"
        return calls

    assert asyncio.run(scenario())["short"] == 0, "a run that ended before its first renewal never renews"
