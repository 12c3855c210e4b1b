"""Two stream-app workers share the work by partition, and each answers for keys the other owns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reach.client import Client
from reach.envelopes import new_id
from tests.integration.agent_support import reach_cli, spawn, wait_for
from tests.integration.stream_app import StreamApp


def test_any_worker_answers_for_any_message(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = StreamApp(tmp_path)
    monkeypatch.setenv("REACH_WEB_PORT", str(first.port))
    first.start()
    (tmp_path / "second").mkdir()
    second = StreamApp(tmp_path / "second")
    second.start()
    echo = spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: all(any(a["state"] == "READY" for a in w.get("/agents")) for w in (first, second)), 60,
                 "echo READY on both workers")
        trace = new_id()
        with Client() as client:
            # 6: under 80% of the echo agent's max_concurrency 8, so the router sheds nothing (OVERLOAD)
            ids = [client.send("demo.echo", {"n": n}, trace_id=trace) for n in range(6)]
        for worker in (first, second):
            rows = wait_for(lambda w=worker: _completed(w, ids), 60, "every row from every worker")
            assert {r["message_id"] for r in rows} == set(ids)
            assert set(worker.get(f"/traces/{trace}")["message_ids"]) == set(ids)
        traced = reach_cli("trace", trace, "--json")
        assert traced.returncode == 0, traced.stderr
        assert {m["message_id"] for m in json.loads(traced.stdout)["messages"]} == set(ids)
        # a rebalance: the second worker leaves, the first takes over its partitions from the changelog
        before = {m: first.get(f"/messages/{m}") for m in ids}
        second.stop()
        after = wait_for(lambda: (lambda rows: rows if all(r.get("status") == "COMPLETED" for r in rows.values())
                                  else None)({m: first.get(f"/messages/{m}") for m in ids}), 60, "rows after rebalance")
        assert after == before
        # the trace index is its own table: its partitions move to the first worker on their own schedule
        wait_for(lambda: set(first.get(f"/traces/{trace}").get("message_ids") or ()) == set(ids), 60,
                 "the whole trace from the remaining worker")
    finally:
        echo.terminate()
        echo.wait(60)
        second.stop()
        first.stop()


def _completed(worker: StreamApp, ids: list[str]) -> list[dict[str, object]] | None:
    rows = [worker.get(f"/messages/{m}") for m in ids]
    return rows if all(row.get("status") == "COMPLETED" for row in rows) else None
