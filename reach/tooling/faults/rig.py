"""One scenario's moving parts: a fresh namespace on the cluster, the router worker(s), two ledger agents."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka.admin import AdminClient

from reach.envelopes import now_ms
from reach.errors import InfraUnavailable
from reach.kafka import topics
from reach.names import Names
from reach.registry import read_registry
from reach.settings import KafkaSettings
from reach.tooling.faults import ledger_agent
from reach.tooling.faults.redis import RedisServer
from reach.tooling.local import process
from reach.tooling.local.infra import LocalInfra
from reach.tooling.local.process import free_port

ROOT = Path(__file__).resolve().parents[3]
AGENTS = 2
LEDGER_AGENT = "reach.tooling.faults.ledger_agent:agent"
_SCRUB = ("REACH_SECURITY_PROTOCOL", "REACH_SASL_", "REACH_SSL_", "REACH_WEB_TOKEN")


def wait_until(check: Callable[[], object], timeout: float, what: str, interval: float = 0.2) -> None:
    """Bounded polling on an observable condition."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise InfraUnavailable(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Worker:
    """A child process (`python -m reach ...`) with its own log; signals go to its pid only."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.args, self.env, self.log = args, env, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None  # a router's web port
        self.expected_exit = False  # set when the suite itself kills or stops it

    def start(self) -> Worker:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "reach", *self.args], cwd=ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def crashed(self) -> int | None:
        """The exit code when it ended without the suite asking it to."""
        code = None if self.proc is None else self.proc.poll()
        return None if code is None or self.expected_exit else code

    def kill(self) -> None:
        self.expected_exit = True
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def stop(self, timeout: float = 30) -> None:
        self.expected_exit = True
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class Rig:
    """The cluster of `home`, a private Redis, and per scenario: namespace, router, agents, ledger."""

    def __init__(self, *, infra: LocalInfra, redis: RedisServer, workdir: Path, scenario: str,
                 env: dict[str, str] | None = None, agent: str = LEDGER_AGENT) -> None:
        self.infra, self.redis = infra, redis
        self.extra_env = dict(env or {})  # e.g. the soak's shorter TTLs, for every process of the rig
        self.agent_target = agent
        status = infra.status()
        if not status.bootstrap:
            raise InfraUnavailable(f"No cluster runs under {infra.home}: run `reach local up --brokers 3` there.")
        self.bootstrap = status.bootstrap
        self.kafka = KafkaSettings.model_construct(bootstrap=self.bootstrap)  # never the caller's REACH_* broker
        self.namespace = "f" + uuid.uuid4().hex[:10]
        self.names = Names(self.namespace)
        self.dir = workdir / f"{scenario}-{self.namespace}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.ledger = self.dir / "ledger.txt"
        self.ledger.touch()
        self.sick_file = self.dir / "sick"
        self.topic = self.names.capability(ledger_agent.CAPABILITY)
        self.routers: list[Worker] = []
        self.agents: list[Worker] = []
        self._started = 0  # processes started so far: each gets its own log
        self.web_port = free_port()  # the first router's, kept across restarts: agents ask its status view
        self.crashes: list[str] = []
        self._lock = threading.Lock()
        self._watch = threading.Event()
        self._watcher: threading.Thread | None = None

    # -- environment and topics --------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
        # PYTHONFAULTHANDLER: a crash in native code prints every thread's Python stack into the process's log
        base.update(PYTHONFAULTHANDLER="1", REACH_BOOTSTRAP=self.bootstrap, REACH_REDIS_URL=self.redis.url,
                    REACH_NAMESPACE=self.namespace,
                    REACH_TOPICS_FILE=str(ROOT / "topics.yaml"), REACH_HOME=str(self.dir / "home"),
                    **{ledger_agent.LEDGER_ENV: str(self.ledger), ledger_agent.SICK_ENV: str(self.sick_file)})
        base.update(self.extra_env)
        base.update(extra)
        return base

    def admin(self) -> AdminClient:
        return AdminClient(self.kafka.admin(log_level=2))

    def create_topics(self) -> None:
        spec = topics.load(ROOT / "topics.yaml")
        admin = self.admin()
        topics.apply(admin, topics.plan(admin, spec.resolved(self.names)))
        topics.ensure_topic(admin, self.topic, spec.family("cap"))
        topics.ensure_topic(admin, self.names.inbox(ledger_agent.AGENT_ID), spec.family("agent"))

    def delete_topics(self) -> None:
        admin = self.admin()
        mine = [t for t in admin.list_topics(timeout=15).topics if t.startswith(f"{self.namespace}.")
                or t.startswith(f"{self.names.router_app_id}-")]
        if mine:
            for future in admin.delete_topics(mine, operation_timeout=30).values():
                try:
                    future.result(timeout=30)
                except Exception:  # noqa: BLE001 - a topic already gone is fine; cleanup never fails a run
                    pass

    # -- processes ---------------------------------------------------------------------------------------
    def start_router(self, *, wait: bool = True) -> Worker:
        n = len(self.routers) + 1  # a restarted worker keeps its REACH_HOME (its faust data dir)
        port = self.web_port if n == 1 else free_port()
        self._started += 1
        worker = Worker(["router", "--interval", "2"], self.env(REACH_WEB_PORT=str(port),
                                                               REACH_HOME=str(self.dir / f"router-{n}")),
                        self.dir / f"router-{n}.{self._started}.log").start()
        worker.port = port
        self.routers.append(worker)
        if not wait:
            return worker
        wait_until(lambda: healthy(port) or worker.proc is None or worker.proc.poll() is not None, 120,
                   f"router {n}'s /healthz")
        if worker.proc is not None and worker.proc.poll() is not None:
            raise InfraUnavailable(f"router {n} exited; see {worker.log}")
        return worker

    def start_agent(self, target: str | None = None) -> Worker:
        """An instance of the rig's agent (or of `target`, MODULE:ATTR of another build of it)."""
        self._started += 1
        worker = Worker(["agent", "run", target or self.agent_target],
                        self.env(REACH_WEB_PORT=str(self.web_port)), self.dir / f"agent.{self._started}.log").start()
        self.agents.append(worker)
        return worker

    def agents_ready(self, count: int = AGENTS) -> bool:
        """`count` live instances that together own every inbox partition."""
        live = [r for r in read_registry(self.kafka, self.names).live(now_ms()) if r.assigned_partitions]
        spec = topics.load(ROOT / "topics.yaml").family("agent")
        return len(live) >= count and len({p for r in live for p in r.assigned_partitions}) == spec.partitions

    def wait_ready(self) -> None:
        wait_until(self.agents_ready, 120, f"{AGENTS} ledger agents owning the inbox", interval=0.5)

    def stop_all(self) -> None:
        self._watch.set()
        if self._watcher is not None:
            self._watcher.join(10)
        for worker in [*self.agents, *self.routers]:
            worker.stop()

    # -- the supervisor ------------------------------------------------------------------------------------
    def supervise(self) -> None:
        """Restart a router or agent that exits on its own (as systemd or Kubernetes would), noting each crash."""
        self._watcher = threading.Thread(target=self._supervise, name="faults-supervisor", daemon=True)
        self._watcher.start()

    def _supervise(self) -> None:
        while not self._watch.wait(0.5):
            with self._lock:
                for worker in [w for w in self.routers + self.agents if w.crashed() is not None]:
                    self.crashes.append(f"{worker.log.name} exited {worker.crashed()}: {crash_line(worker.log)}")
                    if worker in self.routers:
                        self.routers.remove(worker)
                        self.start_router(wait=False)
                    else:
                        self.agents.remove(worker)
                        self.start_agent()

    def paused_supervisor(self) -> threading.Lock:
        """Held while a fault replaces processes itself, so the supervisor does not race it."""
        return self._lock

    # -- the cluster ---------------------------------------------------------------------------------------
    def busiest_leader(self) -> int:
        """The node leading most partitions of this scenario's topics (capability, inbox, receipts)."""
        meta = self.admin().list_topics(timeout=15)
        wanted = (self.topic, self.names.inbox(ledger_agent.AGENT_ID), self.names.receipts)
        leaders = [p.leader for t in wanted for p in meta.topics[t].partitions.values()]
        return max(set(leaders), key=leaders.count)

    def isr_share(self, node_id: int) -> tuple[int, int]:
        """(partitions whose ISR holds the node, partitions it leads), across the cluster, as the others see it."""
        meta = self.admin().list_topics(timeout=15)
        parts = [p for t in meta.topics.values() for p in t.partitions.values()]
        return sum(node_id in p.isrs for p in parts), sum(p.leader == node_id for p in parts)

    def node_pid(self, node_id: int) -> int:
        pid = next(n.pid for n in self.infra.nodes() if n.node_id == node_id)
        if pid is None:
            raise InfraUnavailable(f"node {node_id} has no recorded pid")
        return pid

    def fully_replicated(self) -> bool:
        """Every partition of the cluster has its whole replica set in sync (nothing under-replicated)."""
        try:
            meta = self.admin().list_topics(timeout=5)
        except Exception:  # noqa: BLE001 - a cluster that does not answer is not replicated yet
            return False
        brokers = len(meta.brokers)
        return brokers == len(self.infra.nodes()) and all(
            len(p.isrs) == len(p.replicas) for t in meta.topics.values() for p in t.partitions.values())

    def summary(self) -> dict[str, object]:
        return {"namespace": self.namespace, "dir": str(self.dir), "bootstrap": self.bootstrap}


def crash_line(log: Path) -> str:
    """Why a crashed process ended: the last native assertion, else faulthandler's first line, else its last line
    (faulthandler's thread stacks follow in the log)."""
    lines = process.tail(log, 400).splitlines()
    for marker in (": Assertion", "Fatal Python error"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1][:200]
    return (lines[-1] if lines else "")[:200]


def healthy(port: int) -> bool:
    """The stream app on `port` answers /healthz with ok."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(json.loads(resp.read()).get("ok"))
    except (OSError, ValueError):
        return False
