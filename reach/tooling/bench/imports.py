"""How many runtime modules outside `reach/kafka` import confluent_kafka (issue 36's target: none).

Runtime is every module of the `reach` package except `reach/kafka` (the one Kafka layer) and `reach/tooling`
(bench, demo, faults, local: run by the CLI, never by a deployed process), the rule of the import test. Every import
statement counts, also one inside a function or under TYPE_CHECKING. Read from the installed package's source.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import reach

PACKAGE = Path(reach.__file__).resolve().parent
EXEMPT = ("kafka", "tooling")


def imports_confluent_kafka(source: str) -> bool:
    """Whether a module's source imports confluent_kafka (or any module under it)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(_is_ck(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and _is_ck(node.module or ""):
            return True
    return False


@cache
def offenders(package: Path = PACKAGE) -> tuple[str, ...]:
    """The runtime modules (paths relative to the package's parent) that import confluent_kafka (read once)."""
    exempt = [package / name for name in EXEMPT]
    return tuple(sorted(str(p.relative_to(package.parent)) for p in package.rglob("*.py")
                  if not any(p.is_relative_to(x) for x in exempt)
                  and imports_confluent_kafka(p.read_text(encoding="utf-8"))))


def _is_ck(module: str) -> bool:
    return module == "confluent_kafka" or module.startswith("confluent_kafka.")
