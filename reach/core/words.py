"""Answers in words (pure): a person's text answer to a question whose schema asks for JSON, and an example of what
to send when it does not fit (docs/decisions/0069).

A text answer (a JSON string, or an A2A message of text parts) is taken as it is when the schema accepts a string;
else it fills the schema's one property when that property is the schema's only one and a string (`{"name": ...}`);
else it is taken when it parses as JSON that the schema accepts. `example` builds a value from the schema (its
`examples`, `default`, `const` or first `enum` value where given, else one by type) for the error that says what to
send instead."""

from __future__ import annotations

import json
from typing import Any

MAX_EXAMPLE_DEPTH = 4
MAX_EXAMPLE_CHARS = 300


def readings(schema: Any, text: str) -> list[Any]:
    """The values a text answer may stand for, in the order they are tried (the caller keeps the first the schema
    accepts): the text itself, the schema's one string property filled with it, the text parsed as JSON."""
    out: list[Any] = [text]
    field = only_string_property(schema)
    if field is not None:
        out.append({field: text})
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return out
    if parsed != text:
        out.append(parsed)
    return out


def only_string_property(schema: Any) -> str | None:
    """The name of the schema's one property when it has exactly one and that one is a string, else None."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties")
    if not isinstance(properties, dict) or len(properties) != 1:
        return None
    [(name, spec)] = properties.items()
    kinds = spec.get("type") if isinstance(spec, dict) else None
    return name if kinds == "string" or (isinstance(kinds, list) and "string" in kinds) else None


def example(schema: Any, depth: int = 0) -> Any:
    """A value shaped like the schema asks (a hint for a person, not a promise that it validates)."""
    if not isinstance(schema, dict) or depth > MAX_EXAMPLE_DEPTH:
        return None
    for given in ("examples", "default", "const", "enum"):
        if given in schema:
            value = schema[given]
            if given in ("examples", "enum"):
                if isinstance(value, list) and value:
                    return value[0]
                continue
            return value
    for key in ("oneOf", "anyOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return example(options[0], depth + 1)
    kind = _kind(schema)
    if kind == "object":
        declared = schema.get("properties")
        properties: dict[str, Any] = declared if isinstance(declared, dict) else {}
        required = [r for r in schema.get("required") or [] if isinstance(r, str)]
        names = required or list(properties)[:3]
        return {name: example(properties.get(name, {"type": "string"}), depth + 1) for name in names}
    if kind == "array":
        items = schema.get("items")
        return [example(items, depth + 1)] if isinstance(items, dict) else []
    if kind in ("integer", "number"):
        low = schema.get("minimum")
        return low if isinstance(low, (int, float)) and not isinstance(low, bool) else 1
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "..."


def _kind(schema: dict[str, Any]) -> str:
    """The schema's type (the first non-null of a list), else guessed from its keywords."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    return "object" if "properties" in schema else "array" if "items" in schema else "string"


def example_text(schema: Any) -> str:
    """`example(schema)` as compact JSON, cut to MAX_EXAMPLE_CHARS."""
    text = json.dumps(example(schema), separators=(", ", ": "), default=str)
    return text if len(text) <= MAX_EXAMPLE_CHARS else text[:MAX_EXAMPLE_CHARS] + "..."
