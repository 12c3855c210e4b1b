"""An empty message or trace id is a 404 of its own, never "the status views do not answer" (503): found by the
A2A fuzzing of issue 37 (`CreateTaskPushNotificationConfig` without params answered 503)."""

from __future__ import annotations

import asyncio

from reach.gateway.statusclient import StatusClient
from reach.settings import ReachSettings


def test_an_empty_id_is_not_found_without_asking_the_views() -> None:
    client = StatusClient(ReachSettings(), "http://127.0.0.1:9")  # nothing listens there: a call would be a 503

    async def run() -> list[int]:
        try:
            return [(await client.message(""))[0], (await client.trace(""))[0], (await client.message("m1"))[0]]
        finally:
            await client.aclose()

    assert asyncio.run(run()) == [404, 404, 503]
