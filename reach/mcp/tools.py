"""Capabilities as MCP tools and outcomes as tool results (pure: no I/O, no gateway).

One tool per live capability name, described by its newest live version: the input schema is the capability's
JSON Schema contract when that describes an object (MCP tools take an object of arguments); a contract of any
other shape is wrapped as `{"payload": <contract>}` and unwrapped on the call. The output schema is declared
only where the contract's is an object; a result that is not an object is structured as `{"result": value}`."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import mcp_types as types

from reach.callers import CHANNEL_PREFIX
from reach.core.versions import parse_version
from reach.mcp.ports import PENDING, Ended, Refused
from reach.records import Capability

WRAPPED = "payload"  # the one argument of a tool whose contract is not an object
RESULT = "result"  # the structured content's key for a result that is not an object
COMPLETED = "COMPLETED"
MAX_TOOLS = 1000  # a registry with more capabilities is listed up to here (a client's context is finite)


def _schema(text: str) -> dict[str, Any] | None:
    """The JSON Schema, or None when there is none or it is not a JSON object (the agent's problem, not ours)."""
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    return schema if isinstance(schema, dict) and schema else None


def _is_object(schema: Mapping[str, Any] | None) -> bool:
    return schema is not None and schema.get("type") == "object"


def newest(capabilities: Iterable[Capability]) -> dict[str, Capability]:
    """The newest live version of each capability name (channels left out: they post where a payload says)."""
    found: dict[str, Capability] = {}
    for cap in capabilities:
        if cap.name.startswith(CHANNEL_PREFIX):
            continue
        held = found.get(cap.name)
        if held is None or parse_version(cap.version) > parse_version(held.version):
            found[cap.name] = cap
    return dict(sorted(found.items()))


def input_schema(cap: Capability) -> dict[str, Any]:
    schema = _schema(cap.input_schema)
    if schema is None:
        return {"type": "object"}  # no contract: any arguments
    if _is_object(schema):
        return schema
    return {"type": "object", "properties": {WRAPPED: schema}, "required": [WRAPPED]}


def wraps(cap: Capability) -> bool:
    """Whether the tool's arguments carry the payload under WRAPPED."""
    schema = _schema(cap.input_schema)
    return schema is not None and not _is_object(schema)


def description(cap: Capability, versions: Iterable[str]) -> str:
    described = (_schema(cap.input_schema) or {}).get("description")
    text = described if isinstance(described, str) and described else cap.name
    tags = f"; tags: {', '.join(cap.tags)}" if cap.tags else ""
    return f"{text} (Agent-Reach capability {cap.name}; live versions: {', '.join(versions)}{tags})"


def tool(cap: Capability, versions: Iterable[str] = ()) -> types.Tool:
    output = _schema(cap.output_schema)
    return types.Tool(name=cap.name, description=description(cap, versions or [cap.version]),
                      input_schema=input_schema(cap), output_schema=output if _is_object(output) else None)


def tools(capabilities: Iterable[Capability]) -> list[types.Tool]:
    """The tools for the capabilities an app may call, by name, newest version's contract."""
    caps = list(capabilities)
    versions: dict[str, list[str]] = {}
    for cap in sorted(caps, key=lambda c: parse_version(c.version), reverse=True):
        versions.setdefault(cap.name, []).append(cap.version)
    return [tool(cap, versions[name]) for name, cap in list(newest(caps).items())[:MAX_TOOLS]]


def fingerprint(capabilities: Iterable[Capability]) -> tuple[tuple[str, str, str, str], ...]:
    """What the tool list is made of: a change of it is a notifications/tools/list_changed."""
    return tuple(sorted({(c.name, c.version, c.input_schema, c.output_schema) for c in capabilities
                         if not c.name.startswith(CHANNEL_PREFIX)}))


def payload_of(cap: Capability, arguments: Mapping[str, Any] | None) -> Any:
    """The message's payload from the tool's arguments."""
    args = dict(arguments or {})
    return args.get(WRAPPED) if wraps(cap) else args


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def refused(refusal: Refused) -> types.CallToolResult:
    """A call the door refused: a tool error with its code and message (422 names the field that fails)."""
    hint = f" ({refusal.hint})" if refusal.hint else ""
    retry = refusal.headers.get("Retry-After")
    after = f"; retry after {retry} s" if retry and not hint else ""
    return error(f"{refusal.error}: {refusal.message}{hint}{after}")


def unknown(name: str) -> types.CallToolResult:
    return error(f"unknown_tool: no live capability {name[:200]!r} this app may call; list the tools again")


def result_of(ended: Ended) -> types.CallToolResult:
    """COMPLETED: the result as structured content (and as JSON text); anything else a tool error with the
    receipt's reason and the message id to look it up by."""
    meta = {"agent-reach/message_id": ended.message_id, "agent-reach/status": ended.status}
    if ended.status == COMPLETED:
        structured = ended.result if isinstance(ended.result, dict) else {RESULT: ended.result}
        return types.CallToolResult(content=[types.TextContent(text=_text(ended.result))],
                                    structured_content=structured, _meta=meta)
    if ended.status == PENDING:
        why = (f"timeout: no terminal receipt for {ended.message_id} within the wait; it may still finish "
               f"(GET /v1/messages/{ended.message_id})")
    else:
        why = ended.reason or f"{ended.message_id} ended {ended.status}"
        why = f"{ended.status.lower()}: {why}" + (f" ({ended.hint})" if ended.hint else "")
    return types.CallToolResult(content=[types.TextContent(text=why)], is_error=True, _meta=meta)
