"""Where the demo runs: the broker and Redis (the local ones unless REACH_BOOTSTRAP is set), its
namespace, its topics, and the repository it runs the example agents from."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import reach
from reach.kafka import clients, topics
from reach.names import Names, check_namespace
from reach.settings import KafkaSettings, ReachSettings, RedisSettings
from reach.tooling.demo.exceptions import DemoError
from reach.tooling.demo.traffic import CAPABILITIES
from reach.tooling.local import LocalInfra


def repo_root() -> Path:
    """The checkout that holds examples/ and topics.yaml (the demo runs its agents from there)."""
    root = Path(reach.__file__).resolve().parents[1]
    if not (root / "examples" / "echo_agent.py").exists():
        raise DemoError(f"The example agents are not next to the reach package ({root}/examples). "
                        "Run the demo from a checkout of the repository (`make demo`).")
    return root


def demo_namespace() -> str:
    """REACH_NAMESPACE when set, else a fresh `demo-<timestamp>`, so repeated demos never mix."""
    return check_namespace(os.environ.get("REACH_NAMESPACE") or time.strftime("demo-%Y%m%d-%H%M%S"))


@dataclass
class Infra:
    """The broker, Redis and namespace of one demo run; `down()` stops only what `up()` started."""

    namespace: str
    home: Path
    root: Path
    topics_file: Path = Path()
    bootstrap: str = ""
    redis_url: str = ""
    local: LocalInfra | None = None
    started_local: bool = False
    created_topics: list[str] = field(default_factory=list)

    @classmethod
    def prepare(cls) -> Infra:
        settings = ReachSettings()
        root = repo_root()
        topics_file = settings.topics_file if settings.topics_file.exists() else root / "topics.yaml"
        return cls(namespace=demo_namespace(), home=settings.home.resolve(), root=root,
                   topics_file=topics_file.resolve())

    def up(self, say: Callable[[str], None]) -> None:
        """Start the local broker and Redis when nothing is configured, then apply the namespace's topics."""
        if not os.environ.get("REACH_BOOTSTRAP"):
            self.local = LocalInfra(self.home)
            if self.local.status().running:
                say(f"using the local broker and Redis already running for {self.home}")
            else:
                say(f"starting a local Kafka broker (KRaft) and Redis in {self.home} ...")
                self.started_local = True  # before up(): a half-started pair is stopped too
                self.local.up()
        status = self.local.status() if self.local else None
        self.bootstrap = (status.bootstrap if status and status.bootstrap else None) or KafkaSettings().servers()
        self.redis_url = (status.redis_url if status and status.redis_url else None) or RedisSettings().url()
        admin = clients.admin(self.kafka())
        clients.check_reachable(admin)
        spec = topics.load(self.topics_file)
        names = Names(self.namespace)
        changes = topics.apply(admin, topics.plan(admin, spec.resolved(names)))
        for capability in CAPABILITIES:
            topics.ensure_topic(admin, names.capability(capability), spec.family("cap"))
        say(f"namespace {self.namespace}: topics.yaml applied ({len(changes)} change(s)), "
            f"capability topics {', '.join(CAPABILITIES)}")

    def kafka(self) -> KafkaSettings:
        """Client settings for this process (REACH_* security settings still apply)."""
        return KafkaSettings(bootstrap=self.bootstrap)

    def env(self) -> dict[str, str]:
        """What the children need to find the same broker, Redis and topics."""
        return {"REACH_NAMESPACE": self.namespace, "REACH_BOOTSTRAP": self.bootstrap,
                "REACH_REDIS_URL": self.redis_url, "REACH_TOPICS_FILE": str(self.topics_file),
                "REACH_HOME": str(self.home)}

    def down(self) -> list[str]:
        """Stop the local broker and Redis if this run started them."""
        if self.local is None or not self.started_local:
            return []
        return self.local.down()
