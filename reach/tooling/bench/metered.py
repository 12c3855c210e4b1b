"""A `reach` command run by the bench with the process's own counters served, and the reader of those counters.

    python -m reach.tooling.bench.metered PORT reach-args...

serves prometheus_client's default registry (where process-wide counters such as `reach_redis_round_trips_total`
live) on 127.0.0.1:PORT, then runs the `reach` entry point with reach-args in the same process (as `python -m reach`
would), so the bench reads what that very process counted. `read` scrapes it; a process that is gone or not
answering reads as None, never as zero.

Until the Kafka worker layer counts the records it decodes (`reach_records_decoded_total`), the wrapper counts
them itself, `reach_bench_records_decoded_total` by record name (one ~0.5 µs increment on a 5-16 µs decode). A
record is read one of two ways: by `reach.kafka.codec.Codec.decode_dict` (`decode`, the module's `decode_dict` and
the Schema Registry codec's single-object path all call it), or by a reader `reach.kafka.avrogen.reader` generated
from the record's .avsc (`receiptbytes.decode_receipt`, `avrogen.decode_dict`: the router's envelopes, every
receipt the status fold and the feed read). The wrapper wraps both: the codec's method, and `avrogen.reader` so
that every reader made afterwards counts a record it read to the end of its bytes (one it gave up on goes on to
the codec, which counts it there: once either way). A decode that bypasses both would not be counted; a process's
own counter, once it exists, is read instead.
"""

from __future__ import annotations

import runpy
import sys
import urllib.request
from collections.abc import Mapping
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

FIGURES = {"redis_round_trips": ("reach_redis_round_trips_total",),
           "records_decoded": ("reach_records_decoded_total", "reach_bench_records_decoded_total")}
"""Figure -> the counters it is read from, the first one any process has (a process's own before the wrapper's)."""
COUNTERS = tuple(name for names in FIGURES.values() for name in names)


def count_decodes(registry: CollectorRegistry = REGISTRY) -> Counter:
    """Count every record decoded in this process, by record name (`reach_bench_records_decoded_total`): the
    codec's decodes and the generated readers' (made after this call); the counter, registered in `registry`."""
    from reach.kafka import avrogen, codec

    decoded = Counter("reach_bench_records_decoded_total", "Avro records decoded by reach.kafka.codec or a reader "
                      "reach.kafka.avrogen generated", ["record"], registry=registry)
    by_name: dict[str, Any] = {}
    original = codec.Codec.decode_dict
    make_reader = avrogen.reader

    def counted(self: codec.Codec, name: str, data: bytes) -> dict[str, Any]:
        child = by_name.get(name)
        if child is None:
            child = by_name[name] = decoded.labels(name)
        child.inc()
        return original(self, name, data)

    def counted_reader(schema: Mapping[str, Any]) -> avrogen.Reader:
        read = make_reader(schema)
        child = decoded.labels(str(schema.get("name")))

        def counting(data: bytes, start: int) -> Any:
            record, end = read(data, start)
            if end == len(data):  # else its caller hands the bytes to the codec, which counts them
                child.inc()
            return record, end

        return counting

    codec.Codec.decode_dict = counted  # type: ignore[method-assign]
    avrogen.reader = counted_reader
    return decoded


def main(argv: list[str]) -> None:
    from prometheus_client import start_http_server

    port, *args = argv
    count_decodes()
    start_http_server(int(port), addr="127.0.0.1")
    sys.argv = ["reach", *args]
    runpy.run_module("reach", run_name="__main__", alter_sys=True)  # `python -m reach <args>`, in this process


def parse(text: str, names: tuple[str, ...] = COUNTERS) -> dict[str, float]:
    """The named counters' totals (summed over their labels) in a Prometheus exposition; absent ones left out."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


def read(port: int, timeout: float = 5.0) -> dict[str, float] | None:
    """One process's counters, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as resp:  # noqa: S310
            return parse(resp.read().decode())
    except (OSError, ValueError):
        return None


def read_all(ports: Mapping[str, int]) -> dict[str, dict[str, float] | None]:
    """Label -> counters of every metered process."""
    return {label: read(port) for label, port in ports.items()}


def per_request(before: Mapping[str, dict[str, float] | None], after: Mapping[str, dict[str, float] | None],
                requests: int) -> dict[str, float | None]:
    """Each figure's growth over every metered process, per request, and per process (`<figure> <label>`).

    A figure is read from the first of its counters that every process has, and left out when none is (a process
    that lacks it, or did not answer: a partial sum would read too low)."""
    if requests <= 0 or not after or any(before.get(k) is None or v is None for k, v in after.items()):
        return {}
    out: dict[str, float | None] = {}
    for key, names in FIGURES.items():
        name = next((n for n in names if all(n in (end or {}) for end in after.values())), None)
        if name is None:
            continue
        grown = {label: (end or {}).get(name, 0.0) - (before.get(label) or {}).get(name, 0.0)
                 for label, end in after.items()}
        out[f"{key}_per_request"] = round(sum(grown.values()) / requests, 3)
        for label, n in grown.items():
            out[f"{key}_per_request {label}"] = round(n / requests, 3)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
