"""A `reach` command run by the bench with the process's own counters served, and the reader of those counters.

    python -m reach.tooling.bench.metered PORT reach-args...

serves prometheus_client's default registry (where process-wide counters such as `reach_redis_round_trips_total`
live) on 127.0.0.1:PORT, then runs the `reach` entry point with reach-args in the same process (as `python -m reach`
would), so the bench reads what that very process counted. `read` scrapes it; a process that is gone or not
answering reads as None, never as zero.
"""

from __future__ import annotations

import runpy
import sys
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = ("reach_redis_round_trips_total", "reach_records_decoded_total")
"""Counters the bench reads when a process has them (the second comes with the Kafka worker layer)."""


def main(argv: list[str]) -> None:
    from prometheus_client import start_http_server

    port, *args = argv
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
    """Each counter's growth over every metered process, per request, and per process (`<name> <label>`).

    A process that answered without a counter has not counted any (the Redis counter exists once a process imports
    reach.redisclient); a counter no process has is left out, and so is everything when a process did not answer
    (a partial sum would read too low)."""
    if requests <= 0 or not after or any(before.get(k) is None or v is None for k, v in after.items()):
        return {}
    out: dict[str, float | None] = {}
    for name in COUNTERS:
        if not any(name in (end or {}) for end in after.values()):
            continue
        key = name.removeprefix("reach_").removesuffix("_total")
        grown = {label: (end or {}).get(name, 0.0) - (before.get(label) or {}).get(name, 0.0)
                 for label, end in after.items()}
        out[f"{key}_per_request"] = round(sum(grown.values()) / requests, 3)
        for label, n in grown.items():
            out[f"{key}_per_request {label}"] = round(n / requests, 3)
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
