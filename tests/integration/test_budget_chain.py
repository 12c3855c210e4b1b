"""Budgets down the chain on the real broker and Redis: parent -> child -> grandchild, each handler reporting 150
tokens and calling the next with the SDK's client, under `max_tokens` 250. The child inherits 100, the grandchild 0:
the router ends the grandchild FAILED BUDGET_EXCEEDED, its handler never runs, and the parent's status row shows
what its children spent; a negative budget is refused by the CLI (exit 2) and REJECTED at the router."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reach.agent import Agent, Context
from reach.client import Client
from reach.envelopes import new_envelope, now_ms
from reach.invoke import InvokeFailed, InvokeRejected, raise_for, result_value
from tests.integration.agent_support import running
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
INPUT, OUTPUT = 100, 50


def chain_agent(client: Client, ran: list[str]) -> Agent:
    agent = Agent("agent://test/chain", max_concurrency=4)

    def step(name: str, next_capability: str | None) -> Any:
        def handler(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
            ran.append(name)
            ctx.usage(input_tokens=INPUT, output_tokens=OUTPUT, model="test-model")
            below: dict[str, Any] = {"budget_left": ctx.budget_left}
            if next_capability is not None:
                try:  # a sync handler: the client blocks its thread, not the agent's loop
                    below["next"] = client.invoke(next_capability, payload, timeout_ms=20_000)
                except InvokeFailed as exc:
                    assert exc.receipt is not None and exc.receipt.error is not None
                    below["next"] = {"ended": exc.receipt.error.code, "message_id": exc.message_id}
            return below

        return handler

    for name, following in (("chain.parent", "chain.child"), ("chain.child", "chain.grandchild"),
                            ("chain.grandchild", None)):
        agent.capability(name, version="1.0.0", input_schema={"type": "object"})(step(name, following))
    return agent


def test_a_chain_stops_at_the_grandchild_when_its_budget_is_spent(namespace: str, tmp_path: Path) -> None:
    ran: list[str] = []
    with Client() as client, running_status(tmp_path) as fold, running_router() as router:
        with running(chain_agent(client, ran)):
            wait_for(lambda: {"chain.parent", "chain.grandchild"} <= {
                c.name for r in router.state.live(now_ms()) for c in r.capabilities}, 60, "the chain agent READY")
            receipt = client.invoke_receipt("chain.parent", {}, timeout_ms=30_000, max_tokens=250)
            assert str(receipt.status) == "COMPLETED", receipt
            result = result_value(receipt)
            assert result["budget_left"] == {"max_tokens": 100}  # 250 - its own 150
            child = result["next"]
            assert child["budget_left"] == {"max_tokens": 0}  # it inherited 100 and spent 150
            stopped = child["next"]
            assert stopped["ended"] == "BUDGET_EXCEEDED"
            assert ran == ["chain.parent", "chain.child"]  # the grandchild's handler never ran

            grandchild = wait_for(lambda: fold.row(stopped["message_id"]), 30, "the grandchild's row")
            assert str(grandchild.status) == "FAILED" and grandchild.last_error is not None
            assert grandchild.last_error.code == "BUDGET_EXCEEDED" and grandchild.last_error.kind == "BUDGET"

            def parent_row() -> Any:
                row = fold.row(receipt.message_id)
                return row if row is not None and row.terminal else None

            row = wait_for(parent_row, 30, "the parent's terminal row")
            assert row.usage is not None and row.usage.tokens == INPUT + OUTPUT  # its own run
            assert row.children_usage is not None  # the child's 150 (the grandchild spent nothing)
            assert (row.children_usage.input_tokens, row.children_usage.output_tokens) == (INPUT, OUTPUT)

            # bad budgets: the CLI refuses before sending; a producer writing to Kafka directly is REJECTED
            bad = subprocess.run([sys.executable, "-m", "reach", "send", "chain.parent", "--payload", "{}",
                                  "--max-tokens", "-5"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                 env=dict(os.environ))
            assert bad.returncode == 2 and "--max-tokens must be between 0" in bad.stdout + bad.stderr
            forged = new_envelope("chain.parent", {}, reply_to=client.replies().topic).model_copy(
                update={"max_tokens": -1})
            client.publish(forged)
            rejected = client.replies().wait(forged.message_id, timeout_ms=20_000)
            with pytest.raises(InvokeRejected, match="BAD_BUDGET"):
                raise_for(rejected)
