"""The router's added costs of decision 0076, one process, no broker: `python -m reach.tooling.bench.subscribers`.

What a session request pays when its session holds a snapshot (a lookup, then the envelope encoded again with it),
what a subscriber's filter costs per request (tags, JSONPath: the payload decoded once), and one notification (built
and encoded). Each line is the mean of a timeit loop, in microseconds."""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

from reach.core import eventfilter, fanout
from reach.envelopes import new_envelope
from reach.kafka import codec
from reach.kafka.codec import decode_dict, encode_dict
from reach.streams.router.affinity import AffinityTable


def cases() -> list[tuple[str, Callable[[], object], int]]:
    table = AffinityTable()
    table.learn("default/s1", "i1", 1000, 1500, snapshot='{"notes":["a","b"]}', snapshot_at=1000)
    env: dict[str, Any] = decode_dict("Envelope", codec.encode(new_envelope(
        "demo.echo", {"amount": 150, "items": list(range(20))}, session_key="s1")))
    carried = {**env, "session_snapshot": '{"notes":["a","b"]}'}
    return [
        ("snapshot lookup (a session's request)", lambda: table.snapshot("default/s1", 1600), 200_000),
        ("envelope encode, as sent (reference)", lambda: encode_dict("Envelope", env), 20_000),
        ("envelope encode with the snapshot", lambda: encode_dict("Envelope", carried), 20_000),
        ("subscriber filter tags:urgent", lambda: eventfilter.Event(env).passes("tags:urgent"), 50_000),
        ("subscriber filter $[?(@.amount > 100)]", lambda: eventfilter.Event(env).passes("$[?(@.amount > 100)]"),
         20_000),
        ("one notification, built and encoded", lambda: encode_dict("Envelope", fanout.notification(env, "agent://d/a")),
         20_000),
    ]


def main() -> None:
    for name, fn, n in cases():
        fn()  # warm: caches, the codec's writer
        print(f"{name:42s} {timeit.timeit(fn, number=n) / n * 1e6:8.2f} us")


if __name__ == "__main__":
    main()
