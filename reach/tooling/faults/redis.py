"""A private redis-server on a free loopback port that a fault test can stop, start again and flush."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

from reach.errors import InfraUnavailable
from reach.tooling.local.infra import _redis_server
from reach.tooling.local.process import free_port


class RedisServer:
    """Never the shared Redis: its own process and port (kept across restarts), persistence off."""

    def __init__(self, workdir: Path, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.workdir = workdir
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start it (again, on the same port) and wait until it answers PING."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = open(self.workdir / f"redis-{self.port}.log", "ab")
        self._proc = subprocess.Popen(
            [_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise InfraUnavailable(f"redis-server on port {self.port} did not start; see {log.name}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Kill it (SIGKILL: an outage, not a clean shutdown); everything in it is gone."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self._proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    FLUSH_TIMEOUT_S = 60.0
    """The flush is the fault: wait for it. 2 s was too short on a loaded two-core machine (load ~76): FLUSHALL timed
    out on the client side and the whole suite stopped at the redis-flush scenario."""

    def flush(self) -> None:
        """FLUSHALL on this private server only."""
        with redis.Redis.from_url(self.url, socket_timeout=self.FLUSH_TIMEOUT_S) as client:
            client.flushall()

    def answers(self) -> bool:
        try:
            with redis.Redis.from_url(self.url, socket_timeout=0.5, socket_connect_timeout=0.5) as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
