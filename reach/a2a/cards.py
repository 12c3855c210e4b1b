"""Agent cards from the registry (pure): the mesh's card (one skill per live capability) and one per capability.

Cards are built per request from the gateway's registry view, so they follow registrations: a new
version changes the skill, the last instance leaving removes it. Channel capabilities (`channel.*`)
are left out: an app may call them only when an operator listed them for it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_1_0, TransportProtocol
from google.protobuf.struct_pb2 import Struct

from reach.a2a.bearer import SCHEME
from reach.a2a.hints import (
    BUDGET_EXTENSION,
    COST_LIMIT,
    IDEMPOTENCY_EXTENSION,
    IDEMPOTENCY_FIELD,
    SKILL_EXTENSION,
    TOKEN_LIMIT,
)
from reach.callers import CHANNEL_PREFIX
from reach.core.versions import parse_version
from reach.records import Capability

MESH_PATH = "/a2a/"
CAPABILITY_PATH = "/a2a/cap/{capability}/"
JSON = "application/json"
TEXT = "text/plain"
CARD_VERSION = "1"
KAFKA_BINDING = "urn:agent-reach:a2a-kafka:v1"  # the A2A-over-Kafka binding (docs/a2a.md#the-a2a-over-kafka-binding)
TURNS_EXTENSION = "urn:agent-reach:a2a:turns:v1"  # tasks may ask back: input-required / auth-required
PUSH_PROGRESS_EXTENSION = "urn:agent-reach:a2a:push-progress:v1"  # a push config that also gets progress and chunks
DEPENDS_EXTENSION = "urn:agent-reach:a2a:depends-on:v1"  # which capabilities a skill's handlers call (depends_on)
Depends = Mapping[str, Sequence[str]]


def extensions(push: bool, calls: Depends | None = None) -> list[AgentExtension]:
    """What the cards declare beyond the core protocol (docs/a2a.md#extensions): how a task asks back, and, when push
    configs are kept, the opt-in to progress events for a config (activated with the `A2A-Extensions` header)."""
    found = [AgentExtension(
        uri=TURNS_EXTENSION, required=False,
        description="A task may stop in input-required (the handler asks a question) or auth-required (it asks the "
                    "caller to authorize something first). The status message holds the question as text and "
                    "{\"answer_schema\": ...} as data; answer with SendMessage carrying the task id, one data part "
                    "(or text parts) that satisfies the schema. The task then runs its next turn.",
        params=_struct({"states": ["input-required", "auth-required"], "answer": "SendMessage with task_id"}))]
    found += [
        AgentExtension(
            uri=IDEMPOTENCY_EXTENSION, required=False,
            description="A retried first message makes one task: send the header `Idempotency-Key: <key>` (or "
                        "the message's metadata.idempotencyKey), the same on every retry; a repeat answers with the "
                        "first task (per app; a repeat with other content is rejected). Until A2A v1.1 (a2aproject/"
                        "A2A #1987).",
            params=_struct({"header": "Idempotency-Key", "metadata": IDEMPOTENCY_FIELD})),
        AgentExtension(
            uri=SKILL_EXTENSION, required=False,
            description="Pick the skill on send: metadata.skill_id (of the request or the message) is a skill id of "
                        "this card, `<capability>` or `<capability>@<semver range>` for a version. Until A2A v1.1 "
                        "(a2aproject/A2A #1989).",
            params=_struct({"metadata": "skill_id", "form": "<capability>[@<semver range>]"})),
        AgentExtension(
            uri=BUDGET_EXTENSION, required=False,
            description="A budget for the task and everything it causes: the message's metadata[\"" + BUDGET_EXTENSION
                        + "\"] = {\"" + TOKEN_LIMIT + "\": N, \"" + COST_LIMIT + "\": X}; the task's metadata under "
                        "the same key reports usage and children_usage (gen_ai.usage.* names, cost_micros).",
            params=_struct({"budget": [TOKEN_LIMIT, COST_LIMIT], "report": ["usage", "children_usage"]})),
    ]
    if calls:
        found.append(AgentExtension(
            uri=DEPENDS_EXTENSION, required=False,
            description="What each skill's handlers call, as their agents declare it at registration (`depends_on`: "
                        "`<capability>` or `<capability>@<semver range>`): a skill is only as available as these.",
            params=_struct({name: list(deps) for name, deps in calls.items()})))
    if push:
        found.append(AgentExtension(
            uri=PUSH_PROGRESS_EXTENSION, required=False,
            description="Send the header `A2A-Extensions: " + PUSH_PROGRESS_EXTENSION + "` with "
                        "CreateTaskPushNotificationConfig (or a SendMessage carrying task_push_notification_config) "
                        "and that config also receives the handler's progress and partial results: one POST each, "
                        "{\"event\": \"progress\" | \"chunk\", ...}, besides the status changes.",
            params=_struct({"events": ["progress", "chunk"]})))
    return found


def _struct(values: dict[str, object]) -> Struct:
    out = Struct()
    out.update(values)
    return out


def _newest(capabilities: Iterable[Capability]) -> dict[str, list[Capability]]:
    """Live versions by capability name, newest first; channels left out."""
    by_name: dict[str, list[Capability]] = {}
    for cap in capabilities:
        if not cap.name.startswith(CHANNEL_PREFIX):
            by_name.setdefault(cap.name, []).append(cap)
    return {name: sorted(caps, key=lambda c: parse_version(c.version), reverse=True)
            for name, caps in sorted(by_name.items())}


def _takes_text(schema_text: str) -> bool:
    """Text parts arrive as {"text": ...}: say text/plain only where the input schema accepts that."""
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return False
    if not isinstance(schema, dict) or not schema:
        return True  # no contract: anything goes
    text = (schema.get("properties") or {}).get("text")
    required = set(schema.get("required") or [])
    return isinstance(text, dict) and text.get("type") == "string" and required <= {"text"}


def _description(versions: list[Capability], calls: Sequence[str] = ()) -> str:
    newest = versions[0]
    try:
        described = json.loads(newest.input_schema).get("description")
    except (ValueError, AttributeError):
        described = None
    live = ", ".join(c.version for c in versions)
    needs = f"; calls {', '.join(calls)}" if calls else ""
    return f"{described or newest.name} (Agent-Reach capability; live versions: {live}{needs})"


def skill(versions: list[Capability], calls: Sequence[str] = ()) -> AgentSkill:
    newest = versions[0]
    return AgentSkill(id=newest.name, name=newest.name, description=_description(versions, calls),
                      tags=list(newest.tags),
                      examples=list(newest.examples),
                      input_modes=[JSON, TEXT] if _takes_text(newest.input_schema) else [JSON], output_modes=[JSON])


def interfaces(url: str, bus: str | None) -> list[AgentInterface]:
    """JSON-RPC at `url`, then the bus itself (`kafka:<namespace>`; the brokers are the platform's, never on a card)."""
    found = [AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value,
                            protocol_version=PROTOCOL_VERSION_1_0)]
    if bus:
        found.append(AgentInterface(url=f"kafka:{bus}", protocol_binding=KAFKA_BINDING,
                                    protocol_version=PROTOCOL_VERSION_1_0))
    return found


def _card(*, name: str, description: str, url: str, skills: list[AgentSkill], push: bool,
          bus: str | None, calls: Depends | None = None) -> AgentCard:
    scheme = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="bearer", bearer_format="<key_id>.rat_<hex>",
        description="the A2A token of a gateway app key (`reach apps create` prints it): "
                    "`Authorization: Bearer <key_id>.rat_<hex>`"))
    return AgentCard(
        name=name, description=description, version=CARD_VERSION,
        supported_interfaces=interfaces(url, bus),
        provider=AgentProvider(organization="Agent-Reach", url=url),
        capabilities=AgentCapabilities(streaming=True, push_notifications=push, extensions=extensions(push, calls)),
        security_schemes={SCHEME: scheme},
        security_requirements=[SecurityRequirement(schemes={SCHEME: StringList()})],
        default_input_modes=[JSON, TEXT], default_output_modes=[JSON], skills=skills)


def mesh_card(base_url: str, capabilities: Iterable[Capability], *, push: bool = False,
              bus: str | None = None, depends: Depends | None = None) -> AgentCard:
    """The whole mesh as one agent: a message picks its skill with `metadata.skill_id`; `push`: push notification
    configs are kept (the gateway has its `<ns>.push` topic); `bus`: the namespace of the A2A-over-Kafka interface;
    `depends`: what each capability calls (shown in its skill and declared by the depends-on extension)."""
    newest, given = _newest(capabilities), depends or {}
    calls = {name: list(given[name]) for name in newest if given.get(name)}
    skills = [skill(versions, calls.get(name, ())) for name, versions in newest.items()]
    return _card(name="Agent-Reach mesh", url=base_url.rstrip("/") + MESH_PATH, skills=skills, push=push, bus=bus,
                 calls=calls,
                 description="Every live Agent-Reach capability as a skill; set metadata.skill_id to the "
                             "skill (`<capability>` or `<capability>@<semver range>`). Routing, retries, breakers "
                             "and receipts happen on the bus.")


def capability_card(base_url: str, capability: str, capabilities: Iterable[Capability], *,
                    push: bool = False, bus: str | None = None, depends: Depends | None = None) -> AgentCard | None:
    """One capability as an agent with one skill; None when no live instance serves it."""
    versions = _newest(c for c in capabilities if c.name == capability).get(capability)
    if not versions:
        return None
    calls = list((depends or {}).get(capability, ()))
    return _card(name=capability, description=_description(versions, calls), skills=[skill(versions, calls)],
                 push=push, bus=bus, calls={capability: calls} if calls else None,
                 url=base_url.rstrip("/") + CAPABILITY_PATH.format(capability=capability))
