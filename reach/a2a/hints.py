"""What an A2A send asks beyond its parts (pure): the v1.1 drafts' idempotency key and skill id, and a budget, read
from the request's headers and metadata and checked, since all of it comes from an untrusted caller.

- **Idempotency** (a2aproject/A2A epic #1987, from #928 and #1893): the `Idempotency-Key` header, else the message's
  `metadata.idempotencyKey`: a retried first message with the same key makes one task per app (the gateway's
  idempotency claim, as `/v1`'s `idempotency_key`). Without either, the message id is the key, as before.
- **Skill** (epic #1989, #1812's `skill_id`): `metadata.skill_id` of the request or the message (the older
  `metadata.skill` still works) names a skill of the mesh card, `<capability>` or `<capability>@<semver range>`.
- **Budget** (the cost and budget extension draft, #2121; OpenTelemetry GenAI names): the message's metadata under
  BUDGET_EXTENSION, `{"gen_ai.agent.token_budget.limit": N, "max_cost": X}`, becomes the envelope's `max_tokens`
  and `max_cost_micros` (docs/agents.md, Budgets down the chain); the task's metadata reports what was spent under
  the same key (`usage`). The bridge (reach.a2a.bridge) sends both on its outgoing first messages (`outgoing`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Struct

from reach.core.versions import BadVersion, parse_range
from reach.errors import InvalidName, ReachError
from reach.names import check_capability

IDEMPOTENCY_HEADER = "idempotency-key"  # as the ASGI scope spells header names
IDEMPOTENCY_FIELD = "idempotencyKey"  # Message.metadata
SKILL_FIELDS = ("skill_id", "skill")  # SendMessageRequest.metadata or Message.metadata, first found
IDEMPOTENCY_EXTENSION = "urn:agent-reach:a2a:idempotency:v1"
SKILL_EXTENSION = "urn:agent-reach:a2a:skill-id:v1"
BUDGET_EXTENSION = "urn:agent-reach:a2a:budget:v1"
TOKEN_LIMIT = "gen_ai.agent.token_budget.limit"
COST_LIMIT = "max_cost"
_KEY = re.compile(r"[\x21-\x7e]{1,200}")  # printable ASCII, no spaces: it ends up in logs and a Redis key


class BadHint(ReachError):
    """A header or metadata field of the send that cannot be taken (the caller's error: invalid params)."""


@dataclass(frozen=True, slots=True)
class Skill:
    """The capability a skill id picks, and the version range (`*` when it names none)."""

    capability: str
    version: str = "*"


@dataclass(frozen=True, slots=True)
class Budget:
    """A caller's budget for the task and everything it causes (None: not set)."""

    max_tokens: int | None = None
    max_cost: float | None = None


def idempotency_key(headers: Mapping[str, str] | None, message: Message) -> str | None:
    """The gateway's idempotency key of a first message: `a2a-key:<key>` from the header or the metadata field,
    else `a2a:<message id>`; BadHint for a key that is empty, too long, or not printable ASCII."""
    given = (headers or {}).get(IDEMPOTENCY_HEADER)
    if given is None:
        given = _string(message.metadata, IDEMPOTENCY_FIELD)
    if given is not None:
        if not _KEY.fullmatch(given):
            raise BadHint(f"{IDEMPOTENCY_HEADER.title()} {given[:50]!r} is not a key: send 1-200 printable ASCII "
                          "characters without spaces, the same on every retry of this message (e.g. a UUID)")
        return f"a2a-key:{given}"
    return f"a2a:{message.message_id}"[:200] if message.message_id else None


def skill_of(message: Message, metadata: Struct | None = None) -> Skill | None:
    """The skill a send names (`skill_id`, else `skill`; the request's metadata, then the message's); None when it
    names none; BadHint for one that names no capability or has a bad version range."""
    for source in (metadata, message.metadata):
        for name in SKILL_FIELDS:
            text = _string(source, name)
            if text is not None:
                return _skill(text)
    return None


def _skill(text: str) -> Skill:
    capability, at, version = text.partition("@")
    if len(text) > 300:
        raise BadHint(f"skill_id {text[:50]!r}... is {len(text)} characters; a skill id of the agent card is short")
    try:
        check_capability(capability)
        if at:
            parse_range(version)
    except (InvalidName, BadVersion) as exc:
        raise BadHint(f"skill_id {text[:120]!r} names no skill: send a skill id of the agent card, "
                      f"`<capability>` or `<capability>@<semver range>` ({exc})") from None
    return Skill(capability, version if at else "*")


def budget_of(message: Message) -> Budget:
    """The budget under BUDGET_EXTENSION in the message's metadata (none: Budget()); BadHint when it is not an object
    of non-negative numbers."""
    if message.metadata is None or BUDGET_EXTENSION not in message.metadata.fields:
        return Budget()
    raw = MessageToDict(message.metadata).get(BUDGET_EXTENSION)
    if not isinstance(raw, dict):
        raise BadHint(f"metadata[{BUDGET_EXTENSION!r}] must be an object, e.g. {{{TOKEN_LIMIT!r}: 2000, "
                      f"{COST_LIMIT!r}: 0.5}}")
    tokens, cost = raw.get(TOKEN_LIMIT), raw.get(COST_LIMIT)
    for name, value in ((TOKEN_LIMIT, tokens), (COST_LIMIT, cost)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
                                  or value > 10**15):
            raise BadHint(f"metadata[{BUDGET_EXTENSION!r}][{name!r}] must be a number from 0 to 1e15, not {value!r}")
    if tokens is not None and int(tokens) != tokens:
        raise BadHint(f"metadata[{BUDGET_EXTENSION!r}][{TOKEN_LIMIT!r}] must be a whole number of tokens")
    return Budget(int(tokens) if tokens is not None else None, float(cost) if cost is not None else None)


def usage_report(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a task spent, for its metadata under BUDGET_EXTENSION: its own run's usage and its children's, in
    OpenTelemetry GenAI names (`gen_ai.usage.input_tokens`, ...) plus `cost_micros`; None when nothing was reported."""
    own, children = row.get("usage"), row.get("children_usage")
    if not own and not children:
        return None
    return {"usage": _usage(own), "children_usage": _usage(children)}


def _usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    return {"gen_ai.usage.input_tokens": usage.get("input_tokens", 0),
            "gen_ai.usage.output_tokens": usage.get("output_tokens", 0),
            "gen_ai.request.model": usage.get("model"), "cost_micros": usage.get("cost_micros"),
            "currency": usage.get("currency")}


def outgoing(key: str, budget_left: Mapping[str, int]) -> Struct:
    """The metadata of a bridged first message: its idempotency key (the same on every attempt of the message, so a
    retried attempt makes one remote task where the remote honours the draft) and what is left of the budget, in the
    draft's shape (the cost in units of the currency)."""
    out = Struct()
    out.update({IDEMPOTENCY_FIELD: key})
    left = {TOKEN_LIMIT: budget_left.get("max_tokens"),
            COST_LIMIT: budget_left["max_cost_micros"] / 1_000_000 if budget_left.get("max_cost_micros") is not None
            else None}
    if any(v is not None for v in left.values()):
        out.update({BUDGET_EXTENSION: {k: v for k, v in left.items() if v is not None}})
    return out


def _string(source: Struct | None, name: str) -> str | None:
    if source is None or name not in source.fields:
        return None
    value = source.fields[name]
    if not value.HasField("string_value"):
        raise BadHint(f"metadata.{name} must be a string")
    return value.string_value
