"""The series a PromQL expression reads, for the dashboard checks: each metric name with the label names its
matchers and its `by` / `without` / `on` / `ignoring` / `group_*` clauses use.

No maintained PromQL parser ships on PyPI, so this is a lexer over the language's grammar: string literals,
durations and numbers are dropped first, an identifier followed by `(` is a function or an aggregation, the
language's keywords are not series, and an identifier followed by `{` or standing alone is a metric name.
tests/unit/test_dashboard_queries.py pins it on the shapes the dashboard and the alert rules use."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docker" / "grafana" / "agentreach-dashboard.json"

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_RANGE = re.compile(r"\[[^\]]*\]")  # [5m], [1h:5m]
_DURATION = re.compile(r"(?<![A-Za-z_:0-9])(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z_:0-9])")  # offset 5m
_NUMBER = re.compile(r"(?<![A-Za-z_:])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![A-Za-z_:0-9])")
_TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*|[(){},=!~<>+\-*/^%]")
_GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_KEYWORDS = _GROUPING | {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
_AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                 "quantile", "limitk", "limit_ratio"}  # may take their `by (...)` before the parenthesis


@dataclass
class Series:
    """One metric an expression reads, with the labels it selects on or groups by."""

    name: str
    labels: set[str] = field(default_factory=set)


def series(expr: str) -> dict[str, Series]:
    """Every metric name `expr` reads -> the label names used with it (matchers on it, and every grouping
    clause of the expression, which applies to whatever series it aggregates)."""
    text = _NUMBER.sub(" ", _DURATION.sub(" ", _RANGE.sub(" ", _STRING.sub('""', expr))))
    tokens = _TOKEN.findall(text)
    found: dict[str, Series] = {}
    grouping: set[str] = set()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        following = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in _GROUPING and following == "(":
            close = tokens.index(")", i)
            grouping.update(t for t in tokens[i + 2:close] if t != ",")
            i = close + 1
            continue
        if tok == "{":  # a selector without a name ({__name__=...}) is not used here
            raise ValueError(f"a selector with no metric name in {expr!r}")
        aggregation = tok in _AGGREGATIONS and following in {"by", "without"}
        if (re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", tok) and tok not in _KEYWORDS and following != "("
                and not aggregation):
            one = found.setdefault(tok, Series(tok))
            if following == "{":
                close = tokens.index("}", i)
                inside = tokens[i + 2:close]
                one.labels.update(t for j, t in enumerate(inside)
                                  if re.fullmatch(r"[A-Za-z_]\w*", t) and j + 1 < len(inside)
                                  and inside[j + 1] in {"=", "!", "~"})
                i = close + 1
                continue
        i += 1
    for one in found.values():
        one.labels |= grouping
    return found


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, expression) for every target of every panel, rows' panels included."""
    out: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            out.extend((panel.get("title", ""), t["expr"]) for t in panel.get("targets", []) if t.get("expr"))
            walk(panel.get("panels", []))

    walk(json.loads(path.read_text())["panels"])
    return out
