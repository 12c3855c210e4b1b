"""One routing worker process for the route burst: `python -m reach.tooling.bench.route_worker BATCH_SIZE`.

The Router of `reach.streams.router.route_loop` alone (no faust), in the namespace of REACH_NAMESPACE, until SIGTERM;
several of these share the capability topics by partition, as `reach router` workers do.
"""

from __future__ import annotations

import signal
import sys
import threading

from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.streams.router.ports import NoHandoff
from reach.streams.router.route_loop import Router


def main(argv: list[str]) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda _s, _f: stop.set())
    worker = Router(kafka=KafkaSettings(), reach=ReachSettings(), redis=RedisSettings(),
                    batch_size=int(argv[0]) if argv else 500, handoff=NoHandoff())
    worker.start(ready_timeout=60)
    try:
        while not stop.wait(0.5):
            if not worker.healthy():
                raise SystemExit(f"the router stopped: {worker.error!r}")
    finally:
        worker.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
