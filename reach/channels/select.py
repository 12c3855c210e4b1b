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

from reach.channels.errors import BadCallback
from reach.core.eventfilter import jsonpath

MAX_FIELDS = 32
MAX_EXPRESSION = 200


@lru_cache(maxsize=1024)
def compiled(expression: str) -> JSONPath:
    """The parsed expression, or BadCallback saying why it is not JSONPath (reach.core.eventfilter.jsonpath)."""
    return jsonpath(expression, what="callback field", example="$.answer or $.items[0].id", error=BadCallback,
                    limit=MAX_EXPRESSION)


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
