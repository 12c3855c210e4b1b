"""What a registration may declare (pure), checked before an instance registers (reach/agent/modes.py):

- **One version, one contract.** A capability version names one input and one output schema: a registration whose
  schema for `name@version` differs from a live instance's (of any agent) is refused with the difference, so a
  changed contract ships under a new version instead of splitting callers between two meanings of one. Subscribers
  (fan-out) share the event's input schema; each one's result is its own, so their output schemas may differ.
- **Dependencies.** `depends_on` lists the capabilities the agent's handlers call (`name` or `name@range`). Each
  must be known: served by a registration in the registry at a version within its range, or, when nothing is
  registered for it now, a capability the namespace already has (its capability topic exists: its agents may be
  restarting). And the capability graph, each capability pointing at what its agent depends on, must not gain a
  cycle through one of the registration's own capabilities (a request could call itself until its budget ends).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping

from reach.core.versions import parse_range, satisfies
from reach.names import check_capability
from reach.records import AgentRegistration, CapabilityMode

DIFF_LINES = 40


def parse_dependency(text: str) -> tuple[str, str]:
    """(capability, version range) of a `depends_on` entry: `name` (any version) or `name@range`; ReachError
    (InvalidName / a bad range) when either part is malformed."""
    name, _, wanted = text.partition("@")
    check_capability(name)
    wanted = wanted or "*"
    parse_range(wanted)
    return name, wanted


def _canonical(schema_text: str) -> str:
    try:
        return json.dumps(json.loads(schema_text), indent=2, sort_keys=True)
    except ValueError:
        return schema_text


def schema_conflict(mine: AgentRegistration, live: Iterable[AgentRegistration]) -> str | None:
    """Why `mine` may not register (None: it may): one of its capability versions carries schemas that differ from
    a live instance's for the same version; the message holds a unified diff of the two."""
    others = [r for r in live if r.instance_id != mine.instance_id]
    for cap in mine.capabilities:
        for other in others:
            for theirs in other.capabilities:
                if (theirs.name, theirs.version) != (cap.name, cap.version):
                    continue
                # a subscriber's result is its own (fan-out: each answers for itself); the event it takes is shared
                kinds = ("input_schema",) if cap.mode is CapabilityMode.SUBSCRIBE else ("input_schema", "output_schema")
                for kind in kinds:
                    a, b = _canonical(getattr(theirs, kind)), _canonical(getattr(cap, kind))
                    if a == b:
                        continue
                    diff = list(difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=1,
                                                     fromfile=f"{other.agent_id} ({other.instance_id})",
                                                     tofile=f"{mine.agent_id} (this registration)"))
                    more = f"\n... {len(diff) - DIFF_LINES} more lines" if len(diff) > DIFF_LINES else ""
                    return (f"{mine.agent_id} may not register {cap.name}@{cap.version}: its {kind} differs from the "
                            f"one live instances serve under that version. One version, one contract: give the "
                            f"changed contract a new version (e.g. a minor or major bump).\n"
                            + "\n".join(diff[:DIFF_LINES]) + more)
    return None


def dependency_problem(mine: AgentRegistration, registered: Iterable[AgentRegistration],
                       topic_exists: Callable[[str], bool]) -> str | None:
    """Why `mine`'s `depends_on` may not register (None: it may): a dependency unknown, or a cycle through one of
    its own capabilities. `registered`: every registration in the registry (live or not); `topic_exists(name)`:
    whether the namespace has the capability's topic."""
    if not mine.depends_on:
        return None
    others = [r for r in registered if r.instance_id != mine.instance_id]
    served: dict[str, set[str]] = {}
    for reg in others:
        for cap in reg.capabilities:
            served.setdefault(cap.name, set()).add(cap.version)
    own = {cap.name for cap in mine.capabilities}
    for entry in mine.depends_on:
        name, wanted = parse_dependency(entry)
        if name in own:
            return f"{mine.agent_id} depends on {name}, which it serves itself: a request could call itself."
        versions = served.get(name)
        if versions is None:
            if not topic_exists(name):
                return (f"{mine.agent_id} depends on {name}, which no agent serves and this namespace has never had "
                        f"(no capability topic). Check the name, or start an agent serving it first.")
            continue
        if not any(satisfies(v, wanted) for v in versions):
            return (f"{mine.agent_id} depends on {name}@{wanted}, but it is served only at "
                    f"{', '.join(sorted(versions))}.")
    return _cycle(mine, others, own)


def _cycle(mine: AgentRegistration, others: list[AgentRegistration], own: set[str]) -> str | None:
    """A path from one of `own`'s dependencies back to a capability in `own`, named."""
    graph: dict[str, set[str]] = {}
    for reg in [*others, mine]:
        needs = {parse_dependency(d)[0] for d in reg.depends_on}
        for cap in reg.capabilities:
            graph.setdefault(cap.name, set()).update(needs)
    for start in sorted(own):
        path = _path(graph, start, own)
        if path is not None:
            return (f"{mine.agent_id} would close a dependency cycle: {' -> '.join(path)}. A request could call "
                    "itself until its budget ends; break the cycle (depends_on) first.")
    return None


def _path(graph: Mapping[str, set[str]], start: str, own: set[str]) -> list[str] | None:
    """The first path start -> ... -> a capability in `own` (depth first, each capability visited once)."""
    stack: list[tuple[str, list[str]]] = [(d, [start, d]) for d in sorted(graph.get(start, ()))]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node in own:
            return path
        if node in seen:
            continue
        seen.add(node)
        stack.extend((d, [*path, d]) for d in sorted(graph.get(node, ())))
    return None
