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


def test_an_id_the_views_cannot_route_is_not_found_without_asking_them() -> None:
    """`make fuzz-api` with hypothesis seed 97056134287225680376588730952287070007: A2A SubscribeToTask with id
    "}a\\x87Ï" answered 503 (the views' `{id}` route matches no brace, so their answer was a text 404 that read as
    "do not answer"); `..` asked the views' root (200 {"status": "OK"}, read as a row); a JSON string's lone
    surrogate could not be quoted (UnicodeEncodeError, a 503 too). Each is a 404 now, without a request."""
    client = StatusClient(ReachSettings(), "http://127.0.0.1:9")
    odd = ["}a\u0087\u00cf", "{", "a}b", ".", "..", "\udac0x"]

    async def run() -> list[int]:
        try:
            return [(await ask(key))[0] for key in odd for ask in (client.message, client.trace)]
        finally:
            await client.aclose()

    assert asyncio.run(run()) == [404] * 2 * len(odd)
