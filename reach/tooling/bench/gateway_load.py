"""The gateway bench's load generator: signed POST /v1/envelopes, open loop at a fixed rate, on loopback.

aiohttp's client (faust's own HTTP stack, so already installed): httpx's async pool cost ~10 ms of CPU
per request here and fell seconds behind at 200/s against a trivial server.

    python -m reach.tooling.bench.gateway_load URL KEY_ID RATE SECONDS WARMUP OUT.json   (secret in REACH_BENCH_SECRET)

Requests are due at start + i/RATE whatever the answers (open loop); each one is signed when it is sent
(HMAC over its exact body, as a caller would). It records, for the requests due after WARMUP seconds,
each status and the time from sending to the answer, how late the generator sent (its own lag: when
that grows, the generator is the bottleneck, not the gateway) and its own CPU, then writes OUT.json.
The bench runs several of these processes side by side, so one Python event loop is not the limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp

from reach.tooling.bench.gateway_stack import ENVELOPES, SignedApp, envelope_body

MAX_INFLIGHT = 256  # connections per generator process; past it requests queue (and show as lag)


@dataclass
class LoadResult:
    """What one generator process saw in its measured window."""

    rate: float
    due: int = 0  # requests due in the measured window
    statuses: dict[str, int] = field(default_factory=dict)  # HTTP status (or "error") -> count
    latencies_ms: list[float] = field(default_factory=list)  # send -> 202, one per accepted request
    lag_ms: list[float] = field(default_factory=list)  # how late each request was sent
    window_s: float = 0.0
    first_sent: float | None = None  # time.monotonic() (one clock for every process) of the first measured send
    last_answer: float | None = None  # ... and of the last measured answer: accepted/s is over this span
    cpu_s: float = 0.0  # this process, user + system, over the whole run
    wall_s: float = 0.0


def schedule(rate: float, seconds: float, warmup: float) -> tuple[int, int]:
    """(requests in all, how many of them fall in the warm-up) for a run of warmup + seconds at `rate`."""
    return int(rate * (warmup + seconds)), int(rate * warmup)


async def _one(client: aiohttp.ClientSession, app: SignedApp, url: str, measured: bool, lag_ms: float,
               out: LoadResult, gate: asyncio.Semaphore) -> None:
    async with gate:
        body = envelope_body()
        headers = app.headers(body)
        started = time.perf_counter()
        if measured and out.first_sent is None:
            out.first_sent = time.monotonic()
        try:
            async with client.post(url, data=body, headers=headers) as resp:
                await resp.read()
                status = str(resp.status)
        except (TimeoutError, aiohttp.ClientError):
            status = "error"
        took_ms = (time.perf_counter() - started) * 1000
    if measured:
        out.last_answer = time.monotonic()
        out.statuses[status] = out.statuses.get(status, 0) + 1
        out.lag_ms.append(lag_ms)
        if status == "202":
            out.latencies_ms.append(took_ms)


async def load(base_url: str, app: SignedApp, *, rate: float, seconds: float, warmup: float) -> LoadResult:
    """Send at `rate` for warmup + seconds; the result covers the `seconds` after the warm-up."""
    out = LoadResult(rate=rate)
    total, skip = schedule(rate, seconds, warmup)
    gate = asyncio.Semaphore(MAX_INFLIGHT)
    connector = aiohttp.TCPConnector(limit=MAX_INFLIGHT)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as client:
        loop = asyncio.get_running_loop()
        start = loop.time() + 0.05
        tasks: list[asyncio.Task[None]] = []
        i = 0
        while i < total:
            now = loop.time()
            due_until = int((now - start) * rate) + 1  # everything due by now goes out in this tick
            while i < min(due_until, total):
                lag = max((now - (start + i / rate)) * 1000, 0.0)
                tasks.append(asyncio.create_task(_one(client, app, base_url + ENVELOPES, i >= skip, lag, out, gate)))
                i += 1
            await asyncio.sleep(max(start + i / rate - loop.time(), 0))
        await asyncio.gather(*tasks)
    out.due = total - skip
    out.window_s = seconds
    out.cpu_s = time.process_time() - cpu0
    out.wall_s = time.perf_counter() - wall0
    return out


@dataclass(frozen=True)
class LoadSummary:
    """Several generator processes' results as one: counts added, samples pooled."""

    due: int
    statuses: dict[str, int]
    latencies_ms: list[float]
    lag_ms: list[float]
    window_s: float
    span_s: float  # first measured send -> last measured answer, over every process
    cpu_s: float
    wall_s: float


def summary(results: list[LoadResult]) -> LoadSummary:
    statuses: Counter[str] = Counter()
    for r in results:
        statuses.update(r.statuses)
    return LoadSummary(due=sum(r.due for r in results), statuses=dict(statuses),
                       latencies_ms=[x for r in results for x in r.latencies_ms],
                       lag_ms=[x for r in results for x in r.lag_ms],
                       window_s=max((r.window_s for r in results), default=0.0),
                       span_s=_span([r.first_sent for r in results], [r.last_answer for r in results]),
                       cpu_s=sum(r.cpu_s for r in results), wall_s=max((r.wall_s for r in results), default=0.0))


def _span(firsts: list[float | None], lasts: list[float | None]) -> float:
    """Seconds from the first measured send to the last measured answer of all processes (0: none)."""
    starts, ends = [f for f in firsts if f is not None], [x for x in lasts if x is not None]
    return max(ends) - min(starts) if starts and ends else 0.0


def main(argv: list[str]) -> None:
    url, key_id, rate, seconds, warmup, out_path = argv
    app = SignedApp(app_id="", key_id=key_id, secret=os.environ["REACH_BENCH_SECRET"])
    result = asyncio.run(load(url, app, rate=float(rate), seconds=float(seconds), warmup=float(warmup)))
    Path(out_path).write_text(json.dumps(asdict(result)))


if __name__ == "__main__":
    main(sys.argv[1:])
