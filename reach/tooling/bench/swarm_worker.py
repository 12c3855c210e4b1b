"""One process of the swarm mode: many agent instances through the real SDK, each `Agent.run()` on its own thread.

    python -m reach.tooling.bench.swarm_worker PORT CAPABILITIES SPEC...

SPEC is `<agent index>:<instance count>`; agent i is `agent://swarm/a<i>` serving capability `swarm.c<i mod
CAPABILITIES>` 1.0.0 with a no-op handler. Every instance registers, heartbeats, consumes its inbox, claims leases in
Redis and sends receipts like any agent (reach.agent.runner). The process serves its own counters (Redis round
trips) on 127.0.0.1:PORT (reach.tooling.bench.metered reads them) and takes one JSON command a line on stdin:

    {"op": "stop", "ids": [...]}    those instances drain and leave at once (tombstones); answers their ids
    {"op": "start", "ids": [...]}   run those instances again (a rejoin); answers how many started
    {"op": "stats"}                 answers how many times an instance failed and was started again

Instances start STARTS_PER_S a second and at most STARTING_AT_ONCE at a time, until their start hooks ran (topics
ensured, declarations checked, Redis asked): a fleet rolled out, not hundreds of clients asking the broker for
metadata in the same instant (without the bound, starts on two loaded cores began faster than they finished, and
150 half-started instances per process held an admin client each). An instance whose run fails (the broker did
not answer in time) starts again after a backoff, as its supervisor would restart it; `stats` counts those
restarts. SIGTERM (or stdin closing) stops every
instance.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from typing import Any

from prometheus_client import start_http_server

from reach.agent import Agent

AGENT_PREFIX = "agent://swarm/a"
CAPABILITY_PREFIX = "swarm.c"
TTL_MS = 15_000
STARTS_PER_S = 10.0
STARTING_AT_ONCE = 4
RESTART_S = (1.0, 30.0)  # backoff of an instance whose run failed: first, longest


def agent_id(index: int) -> str:
    return f"{AGENT_PREFIX}{index:04d}"


def capability(index: int, capabilities: int) -> str:
    return f"{CAPABILITY_PREFIX}{index % capabilities:03d}"


def instance_id(index: int, k: int) -> str:
    return f"swarm-a{index:04d}-{k}"


async def _noop(_payload: Any) -> dict[str, Any]:
    return {}


class Swarm:
    """The instances of this process: instance id -> (agent index, its running Agent and thread, if running)."""

    def __init__(self, capabilities: int, specs: list[tuple[int, int]]) -> None:
        self.capabilities = capabilities
        self.plan = {instance_id(i, k): i for i, n in specs for k in range(n)}
        self.running: dict[str, tuple[Agent, threading.Thread]] = {}
        self.stopping: set[str] = set()
        self.restarts = 0
        self.lock = threading.Lock()
        self.starting = threading.BoundedSemaphore(STARTING_AT_ONCE)

    def agent(self, iid: str) -> Agent:
        index = self.plan[iid]
        agent = Agent(agent_id(index), instance_id=iid, region="local", max_concurrency=4, ttl_ms=TTL_MS,
                      build_version="swarm")
        agent.capability(capability(index, self.capabilities), version="1.0.0")(_noop)
        return agent

    def start(self, iid: str) -> None:
        agent = self.agent(iid)
        thread = threading.Thread(target=self._run, args=(iid, agent), name=f"swarm-{iid}", daemon=True)
        with self.lock:
            self.stopping.discard(iid)
            self.running[iid] = (agent, thread)
        thread.start()

    def _run_once(self, agent: Agent) -> None:
        """One run, counted among the starting ones until its start hooks ran (or it failed before)."""
        self.starting.acquire()
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                self.starting.release()
        agent.on_start(release)
        try:
            agent.run(install_signals=False)
        finally:
            release()

    def _run(self, iid: str, agent: Agent) -> None:
        backoff = RESTART_S[0]
        try:
            while True:
                try:
                    self._run_once(agent)
                    return
                except Exception as exc:  # noqa: BLE001 - one instance failing is restarted, the others keep running
                    logging.getLogger("reach.bench.swarm").warning("instance %s stopped (%s); again in %.0f s",
                                                                   iid, exc, backoff)
                time.sleep(backoff)
                backoff = min(backoff * 2, RESTART_S[1])
                with self.lock:
                    if iid in self.stopping or self.running.get(iid, (None,))[0] is not agent:
                        return
                    agent = self.agent(iid)
                    self.running[iid] = (agent, threading.current_thread())
                    self.restarts += 1
        finally:
            with self.lock:
                if self.running.get(iid, (None,))[0] is agent:
                    del self.running[iid]

    def stop(self, ids: list[str] | None = None) -> list[str]:
        with self.lock:
            stopping = [(iid, self.running[iid]) for iid in (ids if ids is not None else sorted(self.running))
                        if iid in self.running]
            self.stopping.update(iid for iid, _ in stopping)
        for _iid, (agent, _thread) in stopping:
            agent.stop()
        for _iid, (_agent, thread) in stopping:
            thread.join(60)
        return [iid for iid, _ in stopping]


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.WARNING)
    port, capabilities, *specs = argv
    start_http_server(int(port), addr="127.0.0.1")
    swarm = Swarm(int(capabilities), [(int(a), int(n)) for a, n in (s.split(":") for s in specs)])
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())

    def commands() -> None:
        for line in sys.stdin:
            command = json.loads(line)
            if command["op"] == "stats":
                answer: dict[str, Any] = {"restarts": swarm.restarts}
            elif command["op"] == "stop":
                answer = {"stopped": swarm.stop(list(command["ids"]))}
            else:
                ids = [i for i in command["ids"] if i in swarm.plan and i not in swarm.running]
                for iid in ids:
                    swarm.start(iid)
                answer = {"started": len(ids)}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()
        done.set()

    threading.Thread(target=commands, name="swarm-commands", daemon=True).start()
    for iid in swarm.plan:
        if done.is_set():
            break
        swarm.start(iid)
        time.sleep(1 / STARTS_PER_S)
    done.wait()
    swarm.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
