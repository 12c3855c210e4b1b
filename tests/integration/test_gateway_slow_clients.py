"""Slow and broken clients do not stall the others: with 200 of them holding connections to one real `reach gateway`
process (slowloris heads trickled a header a second, garbage bytes, huge heads), a good signed POST /v1/envelopes
still gets its 202 within 200 ms (issue 13). The test measures every good request and prints the numbers."""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from reach.settings import KafkaSettings, RedisSettings
from reach.tooling.bench.gateway_stack import ENVELOPES, GatewayStack, child_env, envelope_body, post
from tests.integration.agent_support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # load and latency figures: alone on the machine

SLOW_CLIENTS = 200  # a third each: slowloris, garbage, huge heads
GOOD_REQUESTS = 20
CLAIM_S = 0.200  # issue 13: "a good signed request still gets its 202 within 200 ms"
WITHIN_CLAIM = 18  # of GOOD_REQUESTS: the claim, less two for a scheduler hiccup on the shared two-core machine
NEVER_S = 1.0  # and not one of them waits longer than this


@pytest.fixture
def gateway(namespace: str, tmp_path: Path) -> Iterator[GatewayStack]:
    env = child_env(namespace, KafkaSettings(), home=tmp_path / "home", redis_url=RedisSettings().url(),
                    topics_file=Path(os.environ["REACH_TOPICS_FILE"]))
    with GatewayStack(env=env) as stack:
        yield stack


class SlowClients:
    """`n` hostile connections on an event loop of their own thread, reconnecting whenever the gateway hangs up."""

    KINDS = ("slowloris", "garbage", "huge")

    def __init__(self, port: int, n: int) -> None:
        self.port = port
        self.n = n
        self.open = 0  # connections currently established from our side
        self.answers: Counter[str] = Counter()  # first line of what the gateway answered, per kind
        self.connects: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="slow-clients", daemon=True)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    async def _main(self) -> None:
        await asyncio.gather(*(self._client(self.KINDS[i % 3]) for i in range(self.n)))

    async def _client(self, kind: str) -> None:
        rng = random.Random(hash(kind))
        while not self._stop.is_set():
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(0.2)
                continue
            self.open += 1
            self.connects[kind] += 1
            try:
                await self._behave(kind, reader, writer, rng)
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                self.open -= 1
                writer.close()
            await asyncio.sleep(1.0)  # hung up on: come back a moment later (slow, not a connection flood)

    async def _behave(self, kind: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      rng: random.Random) -> None:
        if kind == "slowloris":  # a request head that never ends: one more header line every second
            writer.write(f"POST {ENVELOPES} HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n".encode())
            while not self._stop.is_set() and not reader.at_eof():
                writer.write(f"X-Slow-{rng.randrange(10**6)}: {'a' * 20}\r\n".encode())
                await writer.drain()
                await self._pause(1.0, reader, kind)
        elif kind == "garbage":  # not HTTP at all: random bytes (no line end, so never a request line) each second
            while not self._stop.is_set() and not reader.at_eof():
                writer.write(bytes(rng.choice(_NOT_CRLF) for _ in range(64)))
                await writer.drain()
                await self._pause(1.0, reader, kind)
        else:  # a head far past the gateway's limit (16 KiB), 8 KiB a second
            writer.write(f"POST {ENVELOPES} HTTP/1.1\r\nHost: gateway\r\n".encode())
            for _ in range(64):
                if self._stop.is_set() or reader.at_eof():
                    break
                writer.write(f"X-Huge-{rng.randrange(10**6)}: {'h' * 8192}\r\n".encode())
                await writer.drain()
                await self._pause(1.0, reader, kind)

    async def _pause(self, seconds: float, reader: asyncio.StreamReader, kind: str) -> None:
        """Sleep, unless the gateway answers meanwhile: then note its status line (and the loop sees EOF)."""
        try:
            line = await asyncio.wait_for(reader.readline(), seconds)
        except TimeoutError:
            return
        if line:
            self.answers[f"{kind}: {line.decode(errors='replace').strip()[:40]}"] += 1
            await reader.read(65536)  # the rest of the answer; the gateway closes after an error answer


_NOT_CRLF = [b for b in range(256) if b not in (10, 13)]


def _status(answer: str) -> int:
    """The status code of a noted answer ("huge: HTTP/1.1 400 Bad Request" -> 400; not HTTP -> 0)."""
    words = answer.split(": ", 1)[-1].split()
    return int(words[1]) if len(words) > 1 and words[0].startswith("HTTP/") and words[1].isdigit() else 0


def _established(pid: int, port: int) -> int:
    """Connections the gateway process holds on its port (its own view, not ours)."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)


def _good_request(gateway: GatewayStack) -> float:
    """One fresh caller: a new connection, a signed envelope; seconds until its 202."""
    body = envelope_body(payload={"text": "good"})
    started = time.perf_counter()
    status, answer = post(gateway.url + ENVELOPES, body, gateway.signed_app().headers(body), timeout=10)
    took = time.perf_counter() - started
    assert status == 202, (status, answer[:300])
    return took


def test_a_good_request_gets_its_202_within_200_ms_while_200_slow_clients_hold_connections(
        gateway: GatewayStack) -> None:
    assert gateway.gateway is not None
    pid = gateway.gateway.pid
    baseline = sorted(_good_request(gateway) for _ in range(5))
    with SlowClients(gateway.port, SLOW_CLIENTS) as slow:
        held = wait_for(lambda: (n := _established(pid, gateway.port)) >= SLOW_CLIENTS * 0.6 and n,
                        60, f"the gateway holding most of the {SLOW_CLIENTS} slow connections", interval=0.2)
        time.sleep(2)  # let every kind reach its steady state (slowloris heads several lines long, huge heads sent)
        latencies, holding = [], []
        for _ in range(GOOD_REQUESTS):
            latencies.append(_good_request(gateway))
            holding.append(_established(pid, gateway.port))
        # the median, not the minimum: garbage and huge heads are answered and hung up on, and come back a second
        # later, so on a busy machine one sample can catch most of them between connections
        held = sorted(holding)[len(holding) // 2]
        answers, connects = dict(slow.answers), dict(slow.connects)
    ms = sorted(round(x * 1000, 1) for x in latencies)
    print(f"\n202 latency with {SLOW_CLIENTS} slow clients (gateway holding a median {held} connections, "
          f"{sorted(holding)}): "
          f"median {ms[len(ms) // 2]} ms, max {ms[-1]} ms, all {ms}; without them: "
          f"{[round(x * 1000, 1) for x in baseline]} ms\nslow clients' connects {connects}, answers {answers}")
    assert held >= SLOW_CLIENTS * 0.6, "the slow clients were holding connections while the good ones were sent"
    assert sum(x <= CLAIM_S for x in latencies) >= WITHIN_CLAIM, f"202 within 200 ms for most: {ms} ms"
    assert max(latencies) <= NEVER_S, f"no good request waits a second: {ms} ms"
    # the huge heads are refused by the HTTP layer (reach.gateway.httpproto's head cap: 431), not left hanging
    assert any(k.startswith("huge:") and 400 <= _status(k) < 500 for k in answers), answers
    assert not any(_status(k) >= 500 for k in answers), f"no 5xx for bad clients: {answers}"
