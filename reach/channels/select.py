"""Callback `fields`: JSONPath expressions (jsonpath-ng) selecting what of a result a callback carries (pure).

The grammar is jsonpath-ng's extended one (filters `[?(@.id > 1)]`, comparisons, arithmetic) less every
regular expression: the `=~` filter operator and the `sub(/re/, ...)` string function are refused when a spec
is parsed. The expressions come from callers and run inside the status fold, which also routes: a regex such
as `(a|aa)+$` backtracks for exponential time and holds the GIL, so no caller-written regex is ever evaluated.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.ext import parse as _parse

from reach.channels.errors import BadCallback

MAX_FIELDS = 32
MAX_EXPRESSION = 200
REGEX_FUNCTIONS = frozenset({"Sub"})  # jsonpath_ng.ext.string.Sub: `sub(/regex/, replacement)`
REGEX_OPERATORS = frozenset({"=~"})


@lru_cache(maxsize=1024)
def compiled(expression: str) -> JSONPath:
    """The parsed expression, or BadCallback saying why it is not JSONPath."""
    if not expression.startswith("$") or len(expression) > MAX_EXPRESSION:
        raise BadCallback(f"callback field {expression[:60]!r} is not a JSONPath starting with '$' "
                          f"(at most {MAX_EXPRESSION} characters), e.g. $.answer or $.items[0].id.")
    try:
        parsed = _parse(expression)
    except Exception as exc:  # JsonPathLexerError, JsonPathParserError, and bare Exceptions from the parser
        raise BadCallback(f"callback field {expression!r} is not valid JSONPath: {exc}") from None
    if _uses_regex(parsed):
        raise BadCallback(f"callback field {expression!r} uses a regular expression (`=~` or sub()), which callback "
                          "fields do not allow; select with paths and comparisons, e.g. "
                          "$.items[?(@.kind == \"a\")].id.")
    return parsed


def _uses_regex(node: object) -> bool:
    """Whether any node of a parsed expression evaluates a regular expression (a walk over its children)."""
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


def check_fields(fields: list[str]) -> list[str]:
    """Every expression compiles, and there are not too many."""
    if len(fields) > MAX_FIELDS:
        raise BadCallback(f"a callback selects at most {MAX_FIELDS} fields; got {len(fields)}.")
    for expression in fields:
        compiled(expression)
    return fields


def select(result: Any, fields: list[str]) -> tuple[dict[str, Any], list[str]]:
    """({expression: value}, the expressions that matched nothing). A single match is its value, several
    a list; an expression that matches nothing maps to None and is listed, so the receiver knows why."""
    values: dict[str, Any] = {}
    unmatched: list[str] = []
    for expression in fields:
        matches = [m.value for m in compiled(expression).find(result)]
        if not matches:
            values[expression] = None
            unmatched.append(expression)
        else:
            values[expression] = matches[0] if len(matches) == 1 else matches
    return values, unmatched
