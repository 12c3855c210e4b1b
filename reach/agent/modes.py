"""What a registration may declare, checked before an instance registers: the registry is read once, and a
registration is refused with the reason when a capability version it serves carries another contract than the live
one, or when its `depends_on` names an unknown capability or closes a cycle (reach.core.declarations). Handlers and
subscribers of one capability may run side by side (docs/decisions/0076: the subscribers are notified observers)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reach.agent.exceptions import InvalidDeclaration
from reach.core import declarations
from reach.core.views.registryview import RegistryView
from reach.errors import ReachError
from reach.kafka import clients
from reach.kafka.types import KafkaException
from reach.names import Names
from reach.records import AgentRegistration
from reach.registry import read_registry
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent")


class RegistrationRefused(InvalidDeclaration):
    """The registration declares what the live registry does not allow (module docstring)."""


def check_registration(mine: AgentRegistration, *, kafka: KafkaSettings, names: Names, now_ms: int,
                       timeout: float = 5.0, registry: Callable[..., RegistryView] | None = None) -> None:
    """Raise RegistrationRefused when `mine` may not register; a registry that cannot be read is logged and
    passed (the router routes by what is live). Costs one read of the compacted registry topic at start
    (and one topic listing when a dependency has no registration); `registry` reads it instead of read_registry
    (the runner's: one read shared by the instances a process starts at once, reach.agent.shared)."""
    try:
        view = (registry or read_registry)(kafka, names, timeout=timeout)
    except (ReachError, KafkaException) as exc:  # the broker, the topic, an ACL
        log.warning("the registry was not read before registering (%s): the declarations of %s are not checked "
                    "here", exc, mine.agent_id)
        return
    live = view.live(now_ms)
    topics: set[str] | None = None

    def topic_exists(capability: str) -> bool:
        nonlocal topics
        if topics is None:
            topics = set(clients.admin(kafka).list_topics(timeout=timeout).topics)
        return names.capability(capability) in topics

    problem = (declarations.schema_conflict(mine, live)
               or declarations.dependency_problem(mine, [i.registration for i in view.instances(now_ms)],
                                                  topic_exists))
    if problem is not None:
        raise RegistrationRefused(problem)
