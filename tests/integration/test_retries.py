"""Retries through delay tiers, dead letters and safe replay, end to end: router + flaky agent + Redis."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import pytest
import redis

from reach import dlq
from reach.client import Client
from reach.core.retry import JITTER
from reach.records import Receipt, Status
from reach.settings import KafkaSettings
from tests.integration.agent_support import (
    Receipts,
    TopicReader,
    reach_cli,
    spawn,
    start_at,
    starts,
    wait_for,
    with_starts,
)
from tests.integration.stream_app import StreamApp


@pytest.fixture
def flaky(stream_app: StreamApp) -> Iterator[subprocess.Popen[bytes]]:
    proc = spawn("examples.flaky_agent:agent")
    wait_for(lambda: any("demo.flaky@1.0.0" in a["capabilities"] and a["state"] == "READY"
                         for a in stream_app.get("/agents")), 60, "the flaky agent READY in the router's registry")
    yield proc
    proc.terminate()
    proc.wait(60)


def steps(receipts: list[Receipt], status: Status) -> list[Receipt]:
    return [r for r in receipts if r.status is status]


def test_transient_failures_retry_on_schedule_and_business_errors_do_not(
        namespace: str, stream_app: StreamApp, flaky: subprocess.Popen[bytes]) -> None:
    receipts = Receipts(f"{namespace}.receipts")
    with Client() as client:
        twice = client.send("demo.flaky", {"fail_times": 2})
        always = client.send("demo.flaky", {"fail_times": 99}, max_attempts=3)
        business = client.send("demo.flaky", {"business_error": True})
    seen = wait_for(lambda: (lambda s: s if all(any(r.status.is_terminal for r in s.get(m, []))
                                                 for m in (twice, always, business)) else None)(
        receipts.by_message()), 60, "a terminal receipt for each message")

    ok = seen[twice]
    assert steps(ok, Status.COMPLETED)[0].attempt == 3
    scheduled = steps(ok, Status.RETRY_SCHEDULED)
    assert [r.attempt for r in scheduled] == [1, 2]
    for retry in scheduled:
        nominal = retry.timings["nominal_delay_ms"]
        assert nominal == 200 * 2 ** (retry.attempt - 1), "base 200 ms doubling per attempt"
        assert JITTER[0] * nominal <= retry.due_at - retry.at <= JITTER[1] * nominal + 1
        next_start = next(r for r in starts(ok) if r.attempt == retry.attempt + 1)
        assert start_at(next_start) >= retry.due_at, "no attempt starts before its due time"

    dead = seen[always]
    [letter_receipt] = steps(dead, Status.DEAD_LETTERED)
    assert letter_receipt.attempt == 3 and letter_receipt.error and letter_receipt.error.code == dlq.RETRIES_EXHAUSTED
    assert len(starts(dead)) == 3

    failed = seen[business]
    assert with_starts([r for r in failed if r.status is not Status.ROUTED]) == [Status.STARTED, Status.FAILED]
    [business_error] = steps(failed, Status.FAILED)
    assert business_error.error and business_error.error.code == "BAD_REQUEST"

    letters = TopicReader(f"{namespace}.dlq")
    records = wait_for(lambda: [r for r in letters.poll() if r.headers.get("x-reach-message-id") == always.encode()],
                       20, "the dead letter")
    assert records[0].headers["x-reach-reason"] == b"RETRIES_EXHAUSTED"
    assert records[0].headers["x-reach-origin-topic"] == f"{namespace}.agent.demo.flaky".encode()


def test_fixed_agent_replay_completes_once_and_a_second_replay_executes_nothing(
        namespace: str, stream_app: StreamApp, flaky: subprocess.Popen[bytes]) -> None:
    receipts = Receipts(f"{namespace}.receipts")
    with Client() as client:
        # fails its 3 attempts (the "bug"); on replay the 4th run succeeds (the "fix")
        ids = [client.send("demo.flaky", {"fail_times": 3, "n": n}, max_attempts=3) for n in range(3)]
    receipts.wait_status(ids, Status.DEAD_LETTERED, timeout=60)
    wait_for(lambda: all(stream_app.get(f"/messages/{m}").get("status") == "DEAD_LETTERED" for m in ids), 30,
             "DEAD_LETTERED rows")

    first = reach_cli("dlq", "replay", "--capability", "demo.flaky", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["replayed"] == 3
    wait_for(lambda: all(stream_app.get(f"/messages/{m}").get("status") == "COMPLETED" for m in ids), 60,
             "COMPLETED rows after the replay")
    rows = [stream_app.get(f"/messages/{m}") for m in ids]
    assert {(r["generation"], r["attempt"]) for r in rows} == {(1, 1)}

    runs = redis.Redis.from_url(os.environ["REACH_REDIS_URL"])
    counts = [int(runs.get(f"{namespace}:flaky:runs:{m}") or 0) for m in ids]
    assert counts == [1, 1, 1]
    again = reach_cli("dlq", "replay", "--capability", "demo.flaky", "--json")
    summary = json.loads(again.stdout)
    assert summary["replayed"] == 0 and summary["skipped_completed"] == 3
    assert [int(runs.get(f"{namespace}:flaky:runs:{m}") or 0) for m in ids] == counts, "nothing ran twice"
    nothing = reach_cli("dlq", "replay", "--capability", "demo.none")
    assert nothing.returncode == 0 and "nothing to replay" in nothing.stdout
    assert reach_cli("dlq", "replay", "--since", "yesterday").returncode == 2


def test_the_capability_policy_sets_max_attempts_when_the_envelope_does_not(
        namespace: str, stream_app: StreamApp) -> None:
    from reach import control
    from reach.names import Names
    from reach.records import Policy

    control.publish(control.policy_record(Policy(max_attempts=2, backoff_base_ms=50), scope="demo.flaky"),
                    names=Names(namespace), kafka=KafkaSettings())
    proc = spawn("examples.flaky_agent:agent")
    try:
        wait_for(lambda: any("demo.flaky@1.0.0" in a["capabilities"] and a["state"] == "READY"
                             for a in stream_app.get("/agents")), 60, "the flaky agent READY")
        receipts = Receipts(f"{namespace}.receipts")
        with Client() as client:
            mid = client.send("demo.flaky", {"fail_times": 99})
        seen = receipts.wait_status([mid], Status.DEAD_LETTERED, timeout=60)[mid]
    finally:
        proc.terminate()
        proc.wait(60)
    assert [r.attempt for r in starts(seen)] == [1, 2]
    [retry] = [r for r in seen if r.status is Status.RETRY_SCHEDULED]
    assert retry.timings["nominal_delay_ms"] == 50
