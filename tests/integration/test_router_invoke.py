"""invoke / invoke_chain / `reach send --wait` end to end through the router."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reach.agent import Agent
from reach.client import Client
from reach.envelopes import now_ms
from reach.invoke import InvokeRejected, InvokeTimeout, InvokeUnroutable, Step, StepResult
from reach.records import StepStatus
from reach.settings import KafkaSettings
from tests.integration.agent_support import running
from tests.integration.router_helpers import running_router, running_status, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def echo_agent() -> Agent:
    agent = Agent("agent://demo/echo", region="local", max_concurrency=8)

    @agent.capability("demo.echo", version="1.0.0", input_schema={"type": "object"})
    async def echo(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    @agent.capability("demo.upper", version="1.0.0", input_schema={"type": "object"})
    async def upper(payload: dict[str, Any]) -> dict[str, Any]:
        return {"text": str(payload.get("text", "")).upper()}

    return agent


def serving(router: Any, capability: str) -> bool:
    return any(c.name == capability for r in router.state.live(now_ms()) for c in r.capabilities)


def test_invoke_returns_the_agents_result(namespace: str, tmp_path: Path) -> None:
    agent = echo_agent()
    with running_status(tmp_path), running_router() as router, running(agent), Client() as client:
        wait_for(lambda: serving(router, "demo.echo"), what="echo agent READY")
        assert client.invoke("demo.echo", {"text": "hi"}, version="^1", timeout_ms=20_000) == {"text": "hi"}
        with pytest.raises(InvokeUnroutable):
            client.invoke("nobody.serves", {}, timeout_ms=20_000)
        with pytest.raises(InvokeUnroutable) as parked:
            client.invoke("nobody.serves", {}, timeout_ms=20_000, expire_at=now_ms() + 600_000)
        assert parked.value.receipt is not None and parked.value.receipt.status == "DEAD_LETTERED"
        with pytest.raises(InvokeUnroutable):
            client.invoke("demo.echo", {}, version="^2", timeout_ms=20_000)

        def reduce(_value: Any, step: StepResult) -> Any:
            assert step.status is StepStatus.OK
            return step.result

        chain = client.invoke_chain([Step("demo.upper", {"text": "abc"}), "demo.echo"], reduce, timeout_ms=20_000)
        assert chain.value == {"text": "ABC"}
        assert len({s.receipt.trace_id for s in chain.steps if s.receipt}) == 1


def test_validate_at_router_rejects_and_no_router_times_out(namespace: str, tmp_path: Path) -> None:
    from reach import control
    from reach.names import Names
    from reach.records import Policy

    agent = Agent("agent://demo/strict", max_concurrency=4)

    @agent.capability("demo.strict", version="1.0.0",
                      input_schema={"type": "object", "required": ["text"]})
    async def strict(payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    control.publish(control.policy_record(Policy(validate_at_router=True), scope="demo.strict"),
                    names=Names(namespace), kafka=KafkaSettings())
    with running_status(tmp_path), running_router() as router, running(agent), Client() as client:
        wait_for(lambda: serving(router, "demo.strict"), what="strict agent READY")
        assert client.invoke("demo.strict", {"text": "ok"}, timeout_ms=20_000) == {"text": "ok"}
        with pytest.raises(InvokeRejected) as rejected:
            client.invoke("demo.strict", {"nope": 1}, timeout_ms=20_000)
        assert rejected.value.receipt is not None and rejected.value.receipt.error is not None
        assert rejected.value.receipt.error.code == "INVALID_INPUT"
    # with no router running nothing answers: a typed timeout, not a hang
    with Client() as client, pytest.raises(InvokeTimeout):
        client.invoke("demo.echo", {}, timeout_ms=500)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reach", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ))


def test_send_wait_exit_codes(namespace: str, tmp_path: Path) -> None:
    agent = echo_agent()
    with running_status(tmp_path), running_router() as router, running(agent):
        wait_for(lambda: serving(router, "demo.echo"), what="echo agent READY")
        ok = cli("send", "demo.echo", "--payload", '{"text": "hello"}', "--wait", "--timeout", "20")
        assert ok.returncode == 0, ok.stderr
        assert "COMPLETED" in ok.stdout and "hello" in ok.stdout and "agent://demo/echo" in ok.stdout
        missing = cli("send", "nobody.serves", "--payload", "{}", "--wait", "--timeout", "20")
        assert missing.returncode == 1 and "UNROUTABLE" in missing.stdout
    late = cli("send", "demo.echo", "--payload", "{}", "--wait", "--timeout", "1")
    assert late.returncode == 3, late.stdout + late.stderr
