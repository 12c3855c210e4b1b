"""A subscriber's filter (pure): which of a capability's events a subscribing agent is notified of
(AgentRegistration v6 `Capability.filter`, docs/decisions/0076).

Two forms, declared with `@agent.capability(..., mode=CapabilityMode.SUBSCRIBE, filter=...)`:

- `tags:<tag>[,<tag>...]`: events whose routing tags include every one named;
- a JSONPath expression starting with `$` (jsonpath-ng's extended grammar, at most 200 characters): events whose
  JSON payload it finds at least one value in. `$.priority` (the key is there), `$.items[?(@.qty > 5)]` (an item
  with qty over 5); a filter `$[?(...)]` tests the payload object itself: `$[?(@.amount > 100)]`. A payload that is
  not JSON matches no JSONPath filter.

No regular expression is ever evaluated (the `=~` operator and `sub()` are refused when the filter is parsed, as
for callback fields): the router evaluates filters on callers' payloads, and a backtracking regex could hold it.
No filter (null) is every event. A filter that does not parse is refused when the agent declares it; the router,
which reads registrations it did not check, treats a filter it cannot parse as matching nothing (and logs it once).

A JSONPath's cost grows with the payload (a 180 KB list of items took the router ~0.2-0.5 s per filter; security
review of this session), so a payload over MAX_FILTERED_PAYLOAD (16 KiB) matches no JSONPath filter (`tags:`
filters still apply), and each filter text is evaluated once per event, however many instances declare it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.ext import parse as _parse

TAGS = "tags:"
MAX_FILTER = 200
MAX_FILTERED_PAYLOAD = 16 * 1024  # bytes: a larger payload matches no JSONPath filter (the module docstring)
REGEX_FUNCTIONS = frozenset({"Sub"})  # jsonpath_ng.ext.string.Sub: `sub(/regex/, replacement)`
REGEX_OPERATORS = frozenset({"=~"})


class BadFilter(ValueError):
    """A filter that is neither `tags:...` nor a JSONPath this module evaluates; the message says why."""


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed filter: the tags every event must carry, or a JSONPath over its payload (`on_item`: evaluated
    against a one-element list holding the payload, so that `$[?(...)]` tests the payload itself)."""

    text: str
    tags: frozenset[str] = frozenset()
    path: JSONPath | None = None
    on_item: bool = False

    def matches(self, tags: Sequence[str], payload: Any) -> bool:
        """Whether an event with these routing tags and this payload (decoded JSON; `NOT_JSON` when it is not)
        passes."""
        if self.path is None:
            return self.tags <= set(tags)
        if payload is NOT_JSON:
            return False
        try:
            return bool(self.path.find([payload] if self.on_item else payload))
        except Exception:  # noqa: BLE001 - a comparison jsonpath-ng cannot make (e.g. str > int) is no match
            return False


NOT_JSON: Any = object()
"""The payload of an event that is not JSON (no JSONPath filter matches it)."""


@lru_cache(maxsize=1024)
def parse(text: str) -> Filter:
    """The filter `text` declares, or BadFilter saying why it is not one."""
    if text.startswith(TAGS):
        tags = frozenset(t.strip() for t in text[len(TAGS):].split(",") if t.strip())
        if not tags:
            raise BadFilter(f"filter {text!r} names no tag; write tags:<tag>[,<tag>...], e.g. tags:urgent,eu.")
        return Filter(text, tags=tags)
    path = jsonpath(text, what="filter", example="tags:urgent or $[?(@.amount > 100)]", error=BadFilter)
    return Filter(text, path=path, on_item=text.replace(" ", "").startswith("$[?"))


def jsonpath(text: str, *, what: str, example: str, error: type[Exception], limit: int = MAX_FILTER) -> JSONPath:
    """`text` parsed by jsonpath-ng's extended grammar, or `error` saying why not: not starting with `$`, over
    `limit` characters, not JSONPath, or evaluating a regular expression (shared with callback fields)."""
    if not text.startswith("$") or len(text) > limit:
        raise error(f"{what} {text[:60]!r} is not a JSONPath starting with '$' (at most {limit} characters), "
                    f"e.g. {example}.")
    try:
        path = _parse(text)
    except Exception as exc:  # JsonPathLexerError, JsonPathParserError, and bare Exceptions from the parser
        raise error(f"{what} {text!r} is not valid JSONPath: {exc}") from None
    if uses_regex(path):
        raise error(f"{what} {text!r} uses a regular expression (`=~` or sub()), which a {what} may not; "
                    "match with paths and comparisons, e.g. $.items[?(@.kind == \"a\")].id.")
    return path


def uses_regex(node: object) -> bool:
    """Whether any node of a parsed JSONPath evaluates a regular expression (a walk over its children)."""
    stack, seen = [node], 0
    while stack and seen < 10_000:
        current = stack.pop()
        seen += 1
        if type(current).__name__ in REGEX_FUNCTIONS or getattr(current, "op", None) in REGEX_OPERATORS:
            return True
        children = getattr(current, "__dict__", {}).values()
        for child in children:
            if isinstance(child, (list, tuple)):
                stack.extend(c for c in child if isinstance(c, JSONPath))
            elif isinstance(child, JSONPath):
                stack.append(child)
    return False


class Event:
    """What filters read of one envelope, the payload decoded at most once (only when a JSONPath filter asks)."""

    __slots__ = ("_decoded", "_envelope", "_seen")

    def __init__(self, envelope: Mapping[str, Any]) -> None:
        self._envelope = envelope
        self._decoded: Any = None
        self._seen: dict[str, bool] = {}  # filter text -> passed: each filter evaluated once per event

    @property
    def tags(self) -> Sequence[str]:
        return (self._envelope.get("routing") or {}).get("tags") or ()

    @property
    def payload(self) -> Any:
        if self._decoded is None:
            self._decoded = _decode(self._envelope)
        return self._decoded

    def passes(self, text: str | None) -> bool:
        """Whether the event passes the filter `text` (None: no filter; one that does not parse: no)."""
        if not text:
            return True
        seen = self._seen.get(text)
        if seen is None:
            try:
                found = parse(text)
            except BadFilter:
                seen = False
            else:
                seen = found.matches(self.tags, self.payload if found.path is not None else NOT_JSON)
            self._seen[text] = seen
        return seen


def _decode(envelope: Mapping[str, Any]) -> Any:
    content_type = str(envelope.get("content_type") or "application/json")
    payload = envelope.get("payload") or b""
    if "json" not in content_type or len(payload) > MAX_FILTERED_PAYLOAD:
        return NOT_JSON
    try:
        return json.loads(payload)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return NOT_JSON
