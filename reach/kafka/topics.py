"""Topics as code: load topics.yaml, diff it with the cluster (plan) and reconcile it (apply)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

import yaml
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from reach.errors import ConfigError
from reach.names import Names

REQUIRED = ("registry", "control", "receipts", "status", "dlq")
MAX_MESSAGE_BYTES = "max.message.bytes"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
BROKER_DEFAULT_BYTES = 1_048_588  # Kafka's message.max.bytes when a topic sets no max.message.bytes
PROVENANCE_BYTES = 64 * 1024
"""Room a dead letter needs beyond the original record it keeps untouched: reason, error, origin, headers."""
DEAD_LETTER_BYTES = 1_048_576 + PROVENANCE_BYTES
"""The dlq limit topics.yaml ships (capability records up to 1 MiB); producers writing dead letters use it."""
Family = Literal["cap", "agent", "replies"]


class Environment(BaseModel):
    """Replication on a cluster of at least `brokers` brokers (topics.yaml `environments:`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    brokers: int = Field(gt=0)
    replication_factor: int = Field(gt=0)
    min_insync_replicas: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _fits(self) -> Environment:
        if self.replication_factor > self.brokers:
            raise ValueError(f"replication_factor {self.replication_factor} needs at least that many brokers, "
                             f"not {self.brokers}")
        if self.min_insync_replicas is not None and self.min_insync_replicas > self.replication_factor:
            raise ValueError(f"min_insync_replicas {self.min_insync_replicas} is more than replication_factor "
                             f"{self.replication_factor}: no write would ever be acknowledged")
        return self


class TopicSpec(BaseModel):
    """Partitions, replication and configs of one topic or topic family."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partitions: int = Field(gt=0, le=10_000)
    replication_factor: int | None = Field(default=None, gt=0)
    configs: dict[str, str] = Field(default_factory=dict)
    # the agent family only: inbox partitions by agent id pattern (fnmatch), first match wins (decision 0068)
    sizes: dict[str, int] = Field(default_factory=dict)
    # filled in from the file's `environments:` for a topic without its own replication_factor
    environments: tuple[Environment, ...] = Field(default=(), exclude=True)

    def on_cluster(self, brokers: int) -> TopicSpec:
        """The concrete spec on a cluster of `brokers` brokers: the largest environment it reaches applies."""
        fitting = [e for e in self.environments if e.brokers <= brokers]
        if not fitting:
            return self.model_copy(update={"environments": ()})
        env = max(fitting, key=lambda e: e.brokers)
        configs = dict(self.configs)
        if env.min_insync_replicas is not None:
            configs.setdefault(MIN_INSYNC_REPLICAS, str(env.min_insync_replicas))
        return self.model_copy(update={"replication_factor": env.replication_factor, "configs": configs,
                                       "environments": ()})

    @field_validator("configs", mode="before")
    @classmethod
    def _as_strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(item, (str, int, float, bool)):
                    raise ValueError(f"config {key!r} must be a scalar, got {type(item).__name__}")
            return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
        return value


class Budget(BaseModel):
    """What one namespace may place on its cluster (topics.yaml `budget:`, decision 0068)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas_per_broker: int = Field(gt=0)


class TopicsFile(BaseModel):
    """The whole of topics.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replication_factor: int = Field(default=1, gt=0)
    environments: dict[str, Environment] = Field(default_factory=dict)
    budget: Budget | None = None
    topics: dict[str, TopicSpec]
    families: dict[Family, TopicSpec]

    @model_validator(mode="after")
    def _contract(self) -> TopicsFile:
        missing = [name for name in REQUIRED if name not in self.topics]
        if missing:
            raise ValueError(f"missing required topics: {', '.join(missing)}")
        if not any(name.startswith("retry.") for name in self.topics):
            raise ValueError("at least one retry tier (retry.<delay>) is required")
        if self.topics["receipts"].partitions != self.topics["status"].partitions:
            raise ValueError(
                "receipts and status must have the same partition count (the status table is keyed by "
                f"message_id and fed only from receipts): {self.topics['receipts'].partitions} != "
                f"{self.topics['status'].partitions}"
            )
        for fam in ("cap", "agent", "replies"):
            if fam not in self.families:
                raise ValueError(f"missing topic family {fam!r}")
        sized = [name for name, spec in [*self.topics.items(), *self.families.items()]
                 if spec.sizes and name != "agent"]
        if sized:
            raise ValueError(f"`sizes` is for the agent family's inboxes only, not {', '.join(sized)}")
        bad = {k: v for k, v in self.families["agent"].sizes.items() if not 0 < v <= 10_000}
        if bad:
            raise ValueError(f"agent sizes must be partition counts from 1 to 10,000: {bad}")
        cap, dead = record_bytes(self.families["cap"]), record_bytes(self.topics["dlq"])
        if dead < cap + PROVENANCE_BYTES:
            raise ValueError(
                f"dlq {MAX_MESSAGE_BYTES} ({dead:,}) must be at least the cap family's ({cap:,}) plus "
                f"{PROVENANCE_BYTES:,} bytes of provenance, so that the dead letter of any capability record fits"
            )
        return self

    def dead_letter_bytes(self) -> int:
        """The largest dead letter the dlq takes: producers that write dead letters set message.max.bytes to it."""
        return record_bytes(self.topics["dlq"])

    def retry_tiers(self) -> list[str]:
        return [name.split(".", 1)[1] for name in self.topics if name.startswith("retry.")]

    def resolved(self, names: Names) -> dict[str, TopicSpec]:
        """Fixed topics by full name, with the file's replication (factor and environments) filled in."""
        return {names.topic(name): self._with_rf(spec) for name, spec in self.topics.items()}

    def family(self, family: Family) -> TopicSpec:
        return self._with_rf(self.families[family])

    def inbox(self, agent_id: str) -> TopicSpec:
        """The inbox spec of one agent: the agent family's, with the partitions of the first `sizes` pattern the
        agent id matches (decision 0068: each partition is one instance's share, so 1-2 fit most agents)."""
        spec = self.family("agent")
        for pattern, partitions in spec.sizes.items():
            if fnmatchcase(agent_id, pattern):
                return spec.model_copy(update={"partitions": partitions})
        return spec

    def replication(self, brokers: int) -> tuple[int, int | None]:
        """(replication factor, min.insync.replicas) on a cluster of `brokers` brokers: for topics the file does
        not list, e.g. the stream app's internal ones."""
        spec = self._with_rf(TopicSpec(partitions=1)).on_cluster(brokers)
        isr = spec.configs.get(MIN_INSYNC_REPLICAS)
        return spec.replication_factor or 1, int(isr) if isr else None

    def _with_rf(self, spec: TopicSpec) -> TopicSpec:
        if spec.replication_factor is not None:
            return spec
        return spec.model_copy(update={"replication_factor": self.replication_factor,
                                       "environments": tuple(self.environments.values())})


def record_bytes(spec: TopicSpec) -> int:
    """The largest record a topic takes: its max.message.bytes, else the broker default."""
    value = spec.configs.get(MAX_MESSAGE_BYTES)
    try:
        return int(value) if value is not None else BROKER_DEFAULT_BYTES
    except ValueError:
        raise ValueError(f"{MAX_MESSAGE_BYTES} must be a number of bytes, got {value!r}") from None


# -- loading with line numbers -------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
    """Refuses duplicate keys (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise ConfigError(
                    f"line {key_node.start_mark.line + 1}: duplicate key {key!r} "
                    f"(first at line {seen[key] + 1})"
                )
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    node, line = root, None
    for part in loc:
        if not isinstance(node, yaml.MappingNode):
            break
        for key_node, value_node in node.value:
            if key_node.value == str(part):
                node, line = value_node, key_node.start_mark.line + 1
                break
        else:
            break
    return line


def load(path: Path) -> TopicsFile:
    """Parse and validate topics.yaml; errors name the line and the reason."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(
            f"Cannot read {path}: {exc.strerror}. Set REACH_TOPICS_FILE or run from the repo root."
        ) from None
    try:
        data = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        return TopicsFile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if p not in ("str", "int"))
            line = _line_of(root, loc)
            where = f"line {line}: " if line else ""
            problems.append(f"{where}{'.'.join(map(str, loc)) or '(file)'}: {err['msg']}")
        raise ConfigError(f"{path} is invalid:\n  " + "\n  ".join(problems)) from None


# -- plan and apply ------------------------------------------------------------------------------------

Action = Literal["create", "alter", "add_partitions", "drift", "over_budget"]


@dataclass(frozen=True)
class Change:
    """One difference between topics.yaml and the cluster."""

    action: Action
    topic: str
    detail: str
    spec: TopicSpec | None = None
    configs: dict[str, str] | None = None


def plan(admin: AdminClient, wanted: dict[str, TopicSpec], timeout: float = 15.0) -> list[Change]:
    """The changes that would bring the cluster to `wanted` (drift is reported, never fixed)."""
    meta = admin.list_topics(timeout=timeout)
    existing = meta.topics
    brokers = len(meta.brokers)
    wanted = {name: spec.on_cluster(brokers) for name, spec in wanted.items()}
    changes: list[Change] = []
    present = [name for name in wanted if name in existing]
    current_configs = _describe(admin, present, timeout)
    for name, spec in sorted(wanted.items()):
        if name not in existing:
            changes.append(Change("create", name, _create_detail(spec), spec=spec))
            continue
        replicas = {len(p.replicas) for p in existing[name].partitions.values()}
        if spec.replication_factor is not None and replicas and replicas != {spec.replication_factor}:
            changes.append(Change("drift", name, f"replication factor {'/'.join(map(str, sorted(replicas)))}, "
                                  f"file says {spec.replication_factor} on {brokers} broker(s); move replicas with "
                                  "kafka-reassign-partitions (or recreate the topic)"))
        have = len(existing[name].partitions)
        if have < spec.partitions:
            changes.append(Change("add_partitions", name, f"partitions {have} -> {spec.partitions}", spec=spec))
        elif have > spec.partitions:
            changes.append(Change("drift", name, f"has {have} partitions, file says {spec.partitions}; "
                                  "Kafka cannot remove partitions (recreate the topic by hand)"))
        differ = {k: v for k, v in spec.configs.items() if current_configs[name].get(k) != v}
        if differ:
            detail = ", ".join(f"{k}: {current_configs[name].get(k)} -> {v}" for k, v in differ.items())
            changes.append(Change("alter", name, detail, configs=differ))
    return changes


def inbox_growth(admin: AdminClient, spec: TopicsFile, names: Names, timeout: float = 15.0) -> list[Change]:
    """Inboxes of the namespace with fewer partitions than their agent's size in topics.yaml (`families.agent.sizes`
    or the default): grown by apply. An inbox with more is left as it is (an older, larger default)."""
    meta = admin.list_topics(timeout=timeout)
    changes = []
    for name, topic in sorted(meta.topics.items()):
        agent_id = names.inbox_agent(name)
        if agent_id is None:
            continue
        wanted = spec.inbox(agent_id).on_cluster(len(meta.brokers))
        if len(topic.partitions) < wanted.partitions:
            changes.append(Change("add_partitions", name, f"partitions {len(topic.partitions)} -> "
                                  f"{wanted.partitions} (inbox of {agent_id})", spec=wanted))
    return changes


PROJECTED_AGENT = "agent://fleet/agent"
"""The agent a projection sizes inboxes for: the family's size, or a `sizes` pattern matching every agent."""


@dataclass(frozen=True)
class Footprint:
    """A namespace's partitions on its cluster: what exists, what the plan adds, and its budget (decision 0068)."""

    namespace: str
    brokers: int
    partitions: int
    replicas: int
    max_replicas_per_broker: int  # the busiest broker's share, after the plan's creations spread evenly
    budget: int | None  # replicas per broker, from topics.yaml `budget:`

    @property
    def over(self) -> bool:
        return self.budget is not None and self.max_replicas_per_broker > self.budget

    def describe(self) -> str:
        limit = f" of a budget of {self.budget:,}" if self.budget is not None else " (no budget in topics.yaml)"
        return (f"{self.namespace}.*: {self.partitions:,} partitions, {self.replicas:,} replicas on {self.brokers} "
                f"broker(s); the busiest carries {self.max_replicas_per_broker:,}{limit}")


def footprint(admin: AdminClient, spec: TopicsFile, namespace: str, changes: list[Change], *,
              agents: int = 0, timeout: float = 15.0) -> Footprint:
    """Partitions and replicas of `<namespace>.*` on the cluster, plus the plan's creations and growth, plus
    `agents` more inboxes at the size of PROJECTED_AGENT (a projection)."""
    meta = admin.list_topics(timeout=timeout)
    brokers = max(len(meta.brokers), 1)
    per_broker: Counter[int] = Counter({b: 0 for b in meta.brokers})
    partitions = 0
    for name, topic in meta.topics.items():
        if name.startswith(namespace + "."):
            for part in topic.partitions.values():
                partitions += 1
                per_broker.update(part.replicas)
    added = 0
    for change in changes:
        if change.spec is None or change.action not in ("create", "add_partitions"):
            continue
        have = len(meta.topics[change.topic].partitions) if change.topic in meta.topics else 0
        partitions += change.spec.partitions - have
        added += (change.spec.partitions - have) * (change.spec.replication_factor or 1)
    inbox = spec.inbox(PROJECTED_AGENT).on_cluster(brokers)
    partitions += agents * inbox.partitions
    added += agents * inbox.partitions * (inbox.replication_factor or 1)
    replicas = sum(per_broker.values()) + added
    busiest = max(per_broker.values(), default=0) + -(-added // brokers)
    return Footprint(namespace, brokers, partitions, replicas, busiest,
                     spec.budget.replicas_per_broker if spec.budget else None)


def _create_detail(spec: TopicSpec) -> str:
    isr = spec.configs.get(MIN_INSYNC_REPLICAS)
    detail = f"partitions={spec.partitions} rf={spec.replication_factor}"
    return detail + (f" {MIN_INSYNC_REPLICAS}={isr}" if isr else "")


def apply(admin: AdminClient, changes: list[Change], timeout: float = 30.0) -> list[Change]:
    """Apply every change except drift; returns what was applied."""
    applied: list[Change] = []
    creates = [c for c in changes if c.action == "create" and c.spec]
    if creates:
        futures = admin.create_topics(
            [NewTopic(c.topic, c.spec.partitions, c.spec.replication_factor or 1, config=dict(c.spec.configs))
             for c in creates if c.spec],
            operation_timeout=timeout,
        )
        _wait(futures, ignore="TOPIC_ALREADY_EXISTS")
        _visible(admin, [c.topic for c in creates], timeout)
        applied += creates
    grow = [c for c in changes if c.action == "add_partitions" and c.spec]
    if grow:
        _wait(admin.create_partitions([NewPartitions(c.topic, c.spec.partitions) for c in grow if c.spec]))
        applied += grow
    alters = [c for c in changes if c.action == "alter" and c.configs]
    for change in alters:
        resource = ConfigResource("topic", change.topic)
        for key, value in (change.configs or {}).items():
            resource.add_incremental_config(ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET))
        _wait(admin.incremental_alter_configs([resource]))
        applied.append(change)
    return applied


def ensure_topic(admin: AdminClient, topic: str, spec: TopicSpec, timeout: float = 15.0) -> bool:
    """Create one topic if missing (family topics are created on demand), replicated as the cluster's size asks
    (topics.yaml `environments:`). True when it was created."""
    if _exists(admin, topic, timeout):
        return False
    spec = spec.on_cluster(len(admin.list_topics(topic=topic, timeout=timeout).brokers))  # brokers: any metadata
    futures = admin.create_topics(
        [NewTopic(topic, spec.partitions, spec.replication_factor or 1, config=dict(spec.configs))],
        operation_timeout=timeout,
    )
    created = _wait(futures, ignore="TOPIC_ALREADY_EXISTS") > 0
    _visible(admin, [topic], timeout)
    return created


def _exists(admin: AdminClient, topic: str, timeout: float) -> bool:
    meta = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    return meta is not None and meta.error is None and len(meta.partitions) > 0


_ONE_BY_ONE = 4


def _visible(admin: AdminClient, topics: list[str], timeout: float) -> None:
    """Wait until created topics show in metadata with a leader for every partition: the controller
    acknowledges a create before the broker serves it, and a client that looks at once finds no topic."""
    deadline = time.monotonic() + timeout
    pending = set(topics)
    while pending and time.monotonic() < deadline:
        wait = max(1.0, deadline - time.monotonic())
        found: Mapping[str, Any]
        if len(pending) <= _ONE_BY_ONE:  # a topic's own metadata, not the whole cluster's (decision 0073)
            found = {t: admin.list_topics(topic=t, timeout=wait).topics.get(t) for t in pending}
        else:
            found = admin.list_topics(timeout=wait).topics
        pending = {t for t in pending if not _served(found.get(t))}
        if pending:
            time.sleep(0.1)


def _served(meta: Any) -> bool:
    return meta is not None and meta.error is None and bool(meta.partitions) and all(
        p.leader >= 0 for p in meta.partitions.values())


def _describe(admin: AdminClient, topics: list[str], timeout: float) -> dict[str, dict[str, str]]:
    if not topics:
        return {}
    futures = admin.describe_configs([ConfigResource("topic", t) for t in topics], request_timeout=timeout)
    return {res.name: {k: e.value for k, e in fut.result().items()} for res, fut in futures.items()}


def _wait(futures: dict[Any, Any], ignore: str | None = None) -> int:
    done = 0
    for key, fut in futures.items():
        try:
            fut.result()
            done += 1
        except KafkaException as exc:
            if ignore and exc.args[0].name() == ignore:
                continue
            raise ConfigError(f"Kafka refused the change for {key}: {exc.args[0].str()}") from None
    return done
