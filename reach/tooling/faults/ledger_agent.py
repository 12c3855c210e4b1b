"""The fault suite's echo-like agent: each call it really executes appends `<message_id> <generation> <instance>`
to the side-effect ledger (REACH_FAULTS_LEDGER), the file the checker counts double side effects in.

While the file REACH_FAULTS_SICK_FILE exists every call fails with a retryable error before its side effect
(the sick-downstream fault). Run by `reach faults run`: `reach agent run reach.tooling.faults.ledger_agent:agent`."""

from __future__ import annotations

import os
from typing import Any

from reach.agent import Agent, Context, TransientError

CAPABILITY = "faults.echo"
AGENT_ID = "agent://faults/echo"
LEDGER_ENV = "REACH_FAULTS_LEDGER"
SICK_ENV = "REACH_FAULTS_SICK_FILE"

# A short session timeout and lease, so that a killed or stopped instance's partitions move within seconds; the
# default registration TTL (45 s: a broker failover stalls heartbeats for several seconds, and a 3 s TTL made the
# router see no instance at all); room for 256 calls, so that the router's admission (80% of max_concurrency) does
# not shed the backlog a fault leaves.
agent = Agent(AGENT_ID, max_concurrency=256, lease_margin_ms=1000, drain_grace_s=5,
              consumer_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1500})


def _append(line: str) -> None:
    # one write(2) of a short line with O_APPEND: concurrent instances never interleave inside a line
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@agent.capability(CAPABILITY, version="1.0.0", input_schema={"type": "object"}, output_schema={"type": "object"})
def echo(payload: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Record the side effect, then return the payload."""
    sick = os.environ.get(SICK_ENV)
    if sick and os.path.exists(sick):
        raise TransientError("the downstream is failing every call (sick-downstream fault)", code="SICK")
    _append(f"{ctx.envelope.message_id} {ctx.envelope.generation} {ctx.instance_id}\n")
    return payload
