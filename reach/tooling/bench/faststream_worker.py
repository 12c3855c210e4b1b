"""FastStream's request-reply worker, the second peer the peers mode measures Reach beside.

    python -m reach.tooling.bench.faststream_worker REQUESTS GROUP WORKERS

A FastStream application on its confluent-kafka broker, as its documentation writes a request-reply handler: a
subscriber in a consumer group whose return value FastStream publishes to the request's `reply_to` topic with its
`correlation_id`; WORKERS handlers run concurrently (`max_workers`, which FastStream allows only with its default
ack-first policy: the offset is committed by librdkafka's auto-commit, not after the reply). Its producer has the
other peers' delivery settings (acks=all, idempotent, lz4, linger 2 ms); everything else is FastStream's default.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from reach.settings import KafkaSettings


def build(requests: str, group: str, workers: int) -> Any:
    from faststream import FastStream
    from faststream.confluent import KafkaBroker

    kafka = KafkaSettings()
    security = {k: v.lower() if k == "security.protocol" else v for k, v in kafka.security().items()
                if k != "error_cb"}  # FastStream checks the protocol against its lower-case names
    broker = KafkaBroker(kafka.servers(), acks="all", enable_idempotence=True, compression_type="lz4", linger_ms=2,
                         config=security or None, logger=None)  # type: ignore[arg-type]  # librdkafka keys

    @broker.subscriber(requests, group_id=group, auto_offset_reset="earliest", max_workers=workers)
    async def handle(body: dict[str, Any]) -> dict[str, Any]:
        return {}

    return FastStream(broker, logger=None)


def main(argv: list[str]) -> None:
    requests, group, workers = argv
    asyncio.run(build(requests, group, int(workers)).run())


if __name__ == "__main__":
    main(sys.argv[1:])
