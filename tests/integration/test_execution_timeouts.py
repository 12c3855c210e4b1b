"""Timeouts that fit LLM agents, end to end (router + examples/slow_agent.py + Redis): the agent's declared 30 s
applies to the default envelope, a caller's shorter ask cuts the run and retries it (demo.slow declares
idempotent), a POLICY cap wins over both. Each request has a payload of its own: requests to an idempotent
capability with the same payload and no key run once.

The figures of docs/decisions/0026 scaled down: the handler sleeps 9 s (past the old 8 s envelope default), the
caller asks for 2 s, the cap is 1 s."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from reach.client import Client
from reach.records import Receipt, Status
from tests.integration.agent_support import Receipts, reach_cli, spawn, wait_for
from tests.integration.stream_app import StreamApp

SLOW_MS = 9_000


@pytest.fixture
def slow(stream_app: StreamApp) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn("examples.slow_agent:agent", REACH_SLOW_MS=str(SLOW_MS))
    wait_for(lambda: any("demo.slow@1.0.0" in a["capabilities"] and a["state"] == "READY"
                         for a in stream_app.get("/agents")), 60, "the slow agent READY in the router's registry")
    yield proc
    proc.terminate()
    proc.wait(60)


def _of(receipts: list[Receipt], status: Status) -> list[Receipt]:
    return [r for r in receipts if r.status is status]


def test_declared_timeout_applies_a_shorter_ask_retries_and_the_policy_cap_wins(
        namespace: str, stream_app: StreamApp, slow: subprocess.Popen[bytes]) -> None:
    receipts = Receipts(f"{namespace}.receipts")
    with Client() as client:
        default = client.send("demo.slow", {"ms": SLOW_MS})
        asked = client.send("demo.slow", {"ms": SLOW_MS + 1}, execution_timeout_ms=2_000, max_attempts=2)
    # the cap is read when a run starts: both runs above are under way before it is set
    receipts.wait_status([default, asked], Status.STARTED, timeout=20)
    assert reach_cli("policy", "set", "--capability", "demo.slow", "--execution-timeout", "5h").returncode == 2
    done = reach_cli("policy", "set", "--capability", "demo.slow", "--execution-timeout", "1s")
    assert done.returncode == 0, done.stderr
    with Client() as client:
        capped = client.send("demo.slow", {"ms": SLOW_MS + 2}, execution_timeout_ms=0, max_attempts=2)
        capped_ask = client.send("demo.slow", {"ms": SLOW_MS + 3}, execution_timeout_ms=2_000, max_attempts=2)

    seen = receipts.wait_status([asked], Status.RETRY_SCHEDULED, timeout=20)
    failed = _of(seen[asked], Status.ATTEMPT_FAILED)[0]
    assert failed.attempt == 1 and failed.error and failed.error.code == "EXECUTION_TIMEOUT"
    assert "2000 ms" in failed.error.message, "the caller's ask, not the agent's 30 s"

    seen = receipts.wait_status([capped, capped_ask], Status.ATTEMPT_FAILED, timeout=20)
    for message in (capped, capped_ask):
        cut = _of(seen[message], Status.ATTEMPT_FAILED)[0]
        assert cut.error and cut.error.code == "EXECUTION_TIMEOUT"
        assert "1000 ms" in cut.error.message, "the POLICY cap wins over the agent's 30 s and the caller's 2 s"

    seen = receipts.wait_status([default], Status.COMPLETED, timeout=20)
    [completed] = _of(seen[default], Status.COMPLETED)
    assert completed.attempt == 1 and len(_of(seen[default], Status.STARTED)) == 1, "one run, never cut at 8 s"
    assert not _of(seen[default], Status.ATTEMPT_FAILED)
