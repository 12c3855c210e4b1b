"""Load-aware routing: of two instances at 20% and 70% load the lighter one clearly gets more."""

from __future__ import annotations

from collections import Counter

import pytest

from reach.names import Names
from reach.records import Status
from tests.integration.router_helpers import (
    Instance,
    Sender,
    Worker,
    first_per_message,
    receipts_tail,
    running_router,
    sees,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # load and latency figures: alone on the machine


def test_lighter_instance_receives_clearly_more(namespace: str) -> None:
    names = Names(namespace)
    light = Instance(names, "light", inflight=20, max_concurrency=100, partitions=[0, 1, 2, 3])
    heavy = Instance(names, "heavy", inflight=70, max_concurrency=100, partitions=[4, 5, 6, 7])
    light.heartbeat()
    heavy.heartbeat()
    workers = [Worker(light), Worker(heavy)]
    sender = Sender(names)
    tail = receipts_tail(names)
    outcome: dict[str, object] = {}
    try:
        with running_router() as router:
            wait_for(lambda: sees(router, light) and sees(router, heavy), what="instances registered")
            for _ in range(20):  # 1,000 requests in waves, each answered before the next (a steady load)
                ids = sender.many(50)
                tail.until(lambda rs, ids=ids: len(first_per_message(
                    rs, ids, {Status.COMPLETED, Status.FAILED})) == len(ids), what="a wave answered")
                outcome.update(first_per_message(tail.records, ids, {Status.ROUTED, Status.FAILED}))
    finally:
        for w in workers:
            w.stop()
        tail.close()
    routed = Counter(r.instance_id for r in outcome.values() if r.status is Status.ROUTED)  # type: ignore[attr-defined]
    overloaded = sum(1 for r in outcome.values() if r.status is Status.FAILED)  # type: ignore[attr-defined]
    assert routed["light"] + routed["heavy"] + overloaded == 1000
    assert routed["light"] > 3 * routed["heavy"], (routed, overloaded)
    assert overloaded < 300, (routed, overloaded)  # shed only while completions are in flight
    print(f"light={routed['light']} heavy={routed['heavy']} overload={overloaded}")
