"""Replies are durable: `invoke` calls waiting while the stream app is SIGKILLed and restarted all get them.

The reply is produced by the status fold, which commits the receipts it replied for only after the
reply is acknowledged, and keeps each row's reply_to in its changelog, so a restarted worker answers
for requests another process routed."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from reach.client import Client
from reach.names import Names
from reach.records import Status
from tests.integration.agent_support import Receipts, spawn, wait_for
from tests.integration.stream_app import StreamApp

CALLS = 3  # well under the two slow instances' 2 x 4 slots, so the router sheds none of them


def test_invokes_waiting_across_a_router_sigkill_all_get_their_replies(namespace: str, stream_app: StreamApp) -> None:
    agents: list[subprocess.Popen[bytes]] = [spawn("tests.integration.slow_agent:agent") for _ in range(2)]
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    try:
        wait_for(lambda: sum(a["agent_id"] == "agent://test/slow" and a["state"] == "READY"
                             for a in stream_app.get("/agents")) == 2, 60, "two slow instances READY")
        receipts = Receipts(Names(namespace).receipts)
        with Client() as client:
            client.replies()  # the reply topic exists before anything is sent

            def call(n: int) -> None:
                try:
                    results[n] = client.invoke("test.slow", {"slow": 4, "n": n}, timeout_ms=120_000,
                                               execution_timeout_ms=60_000)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=call, args=(n,)) for n in range(CALLS)]
            for thread in threads:
                thread.start()
            # every handler is running (the callers wait) when the stream app dies
            wait_for(lambda: sum(any(r.status is Status.STARTED for r in rs)
                                 for rs in receipts.by_message().values()) >= CALLS, 60, "every call STARTED")
            stream_app.kill()
            assert not results, "a reply came before the kill: the test proves nothing"
            stream_app.start()
            for thread in threads:
                thread.join(150)
        receipts.close()
    finally:
        for proc in agents:
            proc.terminate()
        for proc in agents:
            proc.wait(60)
    assert not errors, errors
    assert sorted(r["n"] for r in results.values()) == list(range(CALLS))
