"""The sick agent: `agent://demo/sick` serves `demo.echo` 1.0.0 beside the echo agent, and misbehaves on demand.

- REACH_SICK_FAIL_RATE (default 1.0): the share of calls that fail with a retryable error (ATTEMPT_FAILED,
  kind TRANSIENT, code SICK), so its retries go to another instance and its breaker opens.
- REACH_SICK_DELAY_MS (default 0): how long each call sleeps first (a slow instance).
- REACH_SICK_FILE (optional): a JSON file `{"fail_rate": 0.0, "delay_ms": 0}` whose values, when present,
  replace the two above; it is re-read when it changes, so an operator or a test can heal it (or make it
  sick again) without a restart: `echo '{"fail_rate": 0}' > $REACH_SICK_FILE`.

Its region is REACH_AGENT_REGION (default "local"). Run it from the repo root:
  REACH_SICK_FAIL_RATE=0.5 reach agent run examples.sick_agent:agent
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from pathlib import Path
from typing import Any

from reach.agent import Agent, TransientError

log = logging.getLogger("reach.examples.sick")
agent = Agent("agent://demo/sick", region=os.environ.get("REACH_AGENT_REGION", "local"), max_concurrency=8)


class Sickness:
    """The fail rate and delay now: the environment's, overridden by REACH_SICK_FILE while it parses."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.fail_rate = float(env.get("REACH_SICK_FAIL_RATE", "1.0"))
        self.delay_ms = int(env.get("REACH_SICK_DELAY_MS", "0"))
        self._file = Path(env["REACH_SICK_FILE"]) if env.get("REACH_SICK_FILE") else None
        self._seen: float | None = None

    def current(self) -> tuple[float, int]:
        """(fail rate, delay ms), re-reading the file when its mtime moved."""
        if self._file is not None:
            try:
                mtime = self._file.stat().st_mtime
                if mtime != self._seen:
                    self._seen = mtime
                    data = json.loads(self._file.read_text() or "{}")
                    self.fail_rate = float(data.get("fail_rate", self.fail_rate))
                    self.delay_ms = int(data.get("delay_ms", self.delay_ms))
                    log.info("sick agent: fail rate %.2f, delay %d ms (from %s)", self.fail_rate, self.delay_ms,
                             self._file)
            except (OSError, ValueError, TypeError, AttributeError) as exc:
                log.warning("sick agent: %s not applied (%s); keeping fail rate %.2f, delay %d ms", self._file, exc,
                            self.fail_rate, self.delay_ms)
        return self.fail_rate, self.delay_ms


sickness = Sickness()


@agent.capability(
    "demo.echo",
    version="1.0.0",
    input_schema={"type": "object"},
    output_schema={"type": "object"},
    tags=["demo"],
    examples=[{"text": "hello"}],
)
async def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep delay_ms, fail a fail_rate share of calls (retryable), echo the rest."""
    fail_rate, delay_ms = sickness.current()
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000)
    if random.random() < fail_rate:
        raise TransientError(f"the sick agent fails {fail_rate:.0%} of calls", code="SICK")
    return payload
