"""Measures the door: signature verify cost, Redis quota/nonce latency, revoke-to-gone in the directory.

Run from the repository root with REACH_BOOTSTRAP and REACH_REDIS_URL set:
`.venv/bin/python scripts/measure_gateway_door.py` (docs/decisions/0007-gateway-apps.md).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import timeit
import uuid
from collections.abc import Callable
from pathlib import Path

from reach import signing
from reach.appstore import AppStore, KafkaAppLog
from reach.gateway.directory import KafkaAppDirectory
from reach.gateway.nonces import RedisNonceStore
from reach.gateway.ports import CallerApp
from reach.gateway.quotas import RedisQuotas
from reach.gateway.redisconn import door_client
from reach.kafka import clients, topics
from reach.names import Names
from reach.secretbox import secret_box
from reach.settings import KafkaSettings

CALLS = 3000


def _latency(what: str, call: Callable[[int], object]) -> None:
    seconds = []
    for i in range(CALLS):
        start = time.perf_counter()
        call(i)
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    print(f"{what}: p50 {seconds[CALLS // 2] * 1e3:.3f} ms p99 {seconds[CALLS * 99 // 100] * 1e3:.3f} ms "
          f"({CALLS} calls)")


def main() -> None:
    body = b'{"capability":"search.web","payload":{"q":"kafka"}}' * 4
    header = signing.sign(b"rs_secret", body, int(time.time()), "n-0123456789")
    n = 20_000
    took = timeit.timeit(lambda: signing.verify(b"rs_secret", header, body, now=int(time.time())), number=n)
    print(f"verify: {took / n * 1e6:.1f} us per call ({len(body)} B body)")

    ns = "m" + uuid.uuid4().hex[:8]
    names = Names(ns)
    admin = clients.admin(KafkaSettings())
    topics.apply(admin, topics.plan(admin, topics.load(Path("topics.yaml")).resolved(names)))
    try:
        client = door_client(os.environ["REACH_REDIS_URL"])
        quotas = RedisQuotas(client=client, namespace=ns)
        nonces = RedisNonceStore(client=client, namespace=ns)
        app = CallerApp(app_id="app_m", name="m", tenant="t", capabilities=(), rate=1e9, burst=10**9)
        loop = asyncio.new_event_loop()  # the asyncio clients' connections stay on this one loop
        _latency("RedisQuotas.take", lambda _i: loop.run_until_complete(quotas.take(app, "search.web")))
        _latency("RedisNonceStore.claim",
                 lambda i: loop.run_until_complete(nonces.claim("app_m", f"n-{i:08}", 360)))
        loop.run_until_complete(client.aclose())
        loop.close()

        box = secret_box(None, Path(tempfile.mkdtemp()), create=True)
        store = AppStore(log=KafkaAppLog(names=names, kafka=KafkaSettings()), box=box)
        directory = KafkaAppDirectory(names=names, box=box, kafka=KafkaSettings())
        directory.start()
        gone = []
        for _ in range(10):
            made = store.create(name="m", tenant="t", capabilities=[], rate=1, burst=1)
            while directory.lookup(made.key_id) is None:
                time.sleep(0.005)
            store.revoke(made.app_id)  # returns once the broker acknowledged the record
            start = time.perf_counter()
            while directory.lookup(made.key_id) is not None:
                time.sleep(0.005)
            gone.append(time.perf_counter() - start)
        directory.stop()
        print(f"revoke acked -> key gone from the directory: median {statistics.median(gone) * 1e3:.0f} ms, "
              f"max {max(gone) * 1e3:.0f} ms (10 revokes)")
    finally:
        admin.delete_topics([t for t in admin.list_topics(timeout=10).topics if t.startswith(ns + ".")])


if __name__ == "__main__":
    main()
