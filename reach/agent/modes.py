"""A capability is served in one mode at a time (docs/decisions/0040): before an instance registers, the registry
is read, and a registration that would serve a capability in `handle` mode while another agent subscribes to it (or
the reverse) is refused with the reason. The router holds the same rule for a race (handle wins there)."""

from __future__ import annotations

import logging

from reach.agent.exceptions import InvalidDeclaration
from reach.core import fanout
from reach.errors import ReachError
from reach.kafka.types import KafkaException
from reach.names import Names
from reach.records import AgentRegistration
from reach.registry import read_registry
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent")


class RegistrationRefused(InvalidDeclaration):
    """The registration mixes the modes of a capability with another agent's live instances."""


def check_modes(mine: AgentRegistration, *, kafka: KafkaSettings, names: Names, now_ms: int,
                timeout: float = 5.0) -> None:
    """Raise RegistrationRefused when `mine` may not register; a registry that cannot be read is logged and
    passed (the router still refuses a mixed subscription). Costs one read of the compacted registry topic at start."""
    try:
        live = read_registry(kafka, names, timeout=timeout).live(now_ms)
    except (ReachError, KafkaException) as exc:  # the broker, the topic, an ACL: the router still holds the rule
        log.warning("the registry was not read before registering (%s): the modes of %s are not checked here",
                    exc, mine.agent_id)
        return
    problem = fanout.mode_conflict(mine, live)
    if problem is not None:
        raise RegistrationRefused(problem)
