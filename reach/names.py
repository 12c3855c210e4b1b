"""Topic, group and id naming rules of DESIGN.md's Names section."""

from __future__ import annotations

import re

from reach.errors import InvalidName

_SEGMENT = re.compile(r"[a-z0-9][a-z0-9-]*")
_CAPABILITY = re.compile(r"[a-z0-9][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)*")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]*")
AGENT_PREFIX = "agent://"


def check_namespace(namespace: str) -> str:
    """Return the namespace, or raise when it cannot prefix Kafka topic names."""
    if not _NAMESPACE.fullmatch(namespace):
        raise InvalidName(
            f"Namespace {namespace!r} is invalid: expected lower-case letters, digits, '-' or '_' "
            "(REACH_NAMESPACE)."
        )
    return namespace


def check_agent_id(agent_id: str) -> str:
    """Return the agent id, or raise with the rule it broke (`agent://seg/seg`, seg = [a-z0-9][a-z0-9-]*)."""
    if not agent_id.startswith(AGENT_PREFIX):
        raise InvalidName(f"Agent id {agent_id!r} must start with 'agent://', e.g. agent://search/web.")
    segments = agent_id[len(AGENT_PREFIX) :].split("/")
    for seg in segments:
        if not _SEGMENT.fullmatch(seg):
            raise InvalidName(
                f"Agent id {agent_id!r}: segment {seg!r} must match [a-z0-9][a-z0-9-]* "
                "(lower-case letters, digits and '-', not starting with '-')."
            )
    return agent_id


def check_capability(name: str) -> str:
    """Return the capability name, or raise: dotted lower-case segments like `contract.analysis`."""
    if not _CAPABILITY.fullmatch(name or ""):
        raise InvalidName(
            f"Capability {name!r} is invalid: expected dotted lower-case segments matching "
            "[a-z0-9][a-z0-9-]*, e.g. contract.analysis."
        )
    return name


class Names:
    """Every topic and consumer group name of one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = check_namespace(namespace)

    def topic(self, suffix: str) -> str:
        return f"{self.namespace}.{suffix}"

    @property
    def registry(self) -> str:
        return self.topic("registry")

    @property
    def receipts(self) -> str:
        return self.topic("receipts")

    @property
    def loads(self) -> str:
        return self.topic("loads")

    @property
    def status(self) -> str:
        return self.topic("status")

    @property
    def control(self) -> str:
        return self.topic("control")

    @property
    def dlq(self) -> str:
        return self.topic("dlq")

    def retry(self, tier: str) -> str:
        return self.topic(f"retry.{tier}")

    def capability(self, capability: str) -> str:
        return self.topic(f"cap.{check_capability(capability)}")

    @property
    def capability_prefix(self) -> str:
        return self.topic("cap.")

    def inbox(self, agent_id: str) -> str:
        """`agent://search/web` -> `<ns>.agent.search.web`."""
        path = check_agent_id(agent_id)[len(AGENT_PREFIX) :]
        return self.topic("agent." + path.replace("/", "."))

    def replies(self, client_id: str) -> str:
        return self.topic(f"replies.{client_id}")

    def agent_group(self, agent_id: str) -> str:
        return self.inbox(agent_id)

    @property
    def router_app_id(self) -> str:
        return self.topic("router")

    def family_of(self, topic: str) -> str | None:
        """The topics.yaml family (cap, agent, replies) a topic belongs to, if any."""
        for family in ("cap", "agent", "replies"):
            if topic.startswith(self.topic(family + ".")):
                return family
        return None
