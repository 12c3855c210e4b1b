"""Topic, group and id naming rules (every name is `<namespace>.<suffix>`, docs/architecture.md), and the
checks on topic names taken from untrusted records."""

from __future__ import annotations

import re

from reach.errors import InvalidName

_SEGMENT = re.compile(r"[a-z0-9][a-z0-9-]*")
_CAPABILITY = re.compile(r"[a-z0-9][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)*")
_NAMESPACE = re.compile(r"[a-z0-9][a-z0-9_-]*")
_CLIENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_TOPIC = 249  # Kafka's limit on a topic name
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
    def audit(self) -> str:
        """AuditEvent history of the registry and control plane (not compacted), keyed by subject."""
        return self.topic("audit")

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

    @property
    def replays(self) -> str:
        return self.topic("replays")

    @property
    def health(self) -> str:
        """InstanceHealth keyed by instance_id: health and breaker state, one writer per partition."""
        return self.topic("health")

    @property
    def apps(self) -> str:
        """Gateway apps (compacted), keyed by app id."""
        return self.topic("apps")

    @property
    def cancels(self) -> str:
        """Cancel records keyed by message_id (time-retained): reach.cancels."""
        return self.topic("cancels")

    @property
    def push(self) -> str:
        """A2A push notification configs keyed by task id (compacted): reach.a2a.push."""
        return self.topic("push")

    @property
    def intents(self) -> str:
        """Envelopes naming an intent (capability intent.resolve), read by the resolver in front of the router."""
        return self.topic("intents")

    @property
    def handoff(self) -> str:
        """Requests for a human (compacted), keyed by message_id: the context bundle and its handoff state."""
        return self.topic("handoff")

    @property
    def dual_pairs(self) -> str:
        """The resolver's pending dual dispatches (compacted), keyed by the request's message_id."""
        return self.topic("dual-pairs")

    @property
    def idempotency(self) -> str:
        """COMPLETED receipts of business idempotency keys (compacted, a window long), keyed by capability and key."""
        return self.topic("idempotency")

    @property
    def sessions(self) -> str:
        """Session affinity (compacted, an hour long), keyed by session_key: the instance serving it, last seen."""
        return self.topic("sessions")

    @property
    def resolver_group(self) -> str:
        return self.topic("resolver")

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

    def inbox_agent(self, topic: str) -> str | None:
        """`<ns>.agent.search.web` -> `agent://search/web` (segments hold no dots), None for any other topic."""
        prefix = self.topic("agent.")
        if not topic.startswith(prefix) or len(topic) == len(prefix):
            return None
        try:
            return check_agent_id(AGENT_PREFIX + topic[len(prefix):].replace(".", "/"))
        except InvalidName:
            return None

    def replies(self, client_id: str) -> str:
        return self.topic(f"replies.{client_id}")

    def check_reply_to(self, topic: str) -> str:
        """Return a reply_to taken from an envelope, or raise: only `<ns>.replies.<client>` is allowed, so a
        caller cannot make the stream app write into another topic with its credentials."""
        prefix = self.topic("replies.")
        client = topic[len(prefix):] if topic.startswith(prefix) else ""
        if not _CLIENT_ID.fullmatch(client) or len(topic) > _MAX_TOPIC:
            raise InvalidName(f"reply_to {topic!r} is not a reply topic of this namespace: expected "
                              f"{prefix}<client id> (letters, digits, '.', '_', '-'); use reach.invoke.ReplyInbox.")
        return topic

    def check_target(self, topic: str) -> str:
        """Return a delay tier's target topic, or raise: only `<ns>.cap.<capability>` is allowed."""
        prefix = self.capability_prefix
        if not topic.startswith(prefix) or not _CAPABILITY.fullmatch(topic[len(prefix):]) or len(topic) > _MAX_TOPIC:
            raise InvalidName(f"retry target {topic!r} is not a capability topic: expected {prefix}<capability>.")
        return topic

    def check_inbox(self, agent_id: str, topic: str) -> str:
        """Return a registration's inbox topic, or raise unless it is exactly `inbox(agent_id)`."""
        expected = self.inbox(agent_id)
        if topic != expected:
            raise InvalidName(f"inbox_topic {topic!r} of {agent_id} is not its inbox: expected {expected}.")
        return topic

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
