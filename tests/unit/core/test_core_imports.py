"""reach.core is pure: its modules import no Kafka, Redis, HTTP or store client and no reach module outside
reach.core, reach.records, reach.errors and reach.names (the rule in reach/core/__init__.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.import_rules import ROOT, offending
from tests.unit.import_rules import imported as _imported

CORE = ROOT / "reach" / "core"

FORBIDDEN = {"confluent_kafka", "aiokafka", "faust", "mode", "redis", "httpx", "starlette", "fastapi", "uvicorn",
             "rocksdict", "fastavro"}
ALLOWED_REACH = ("reach.core", "reach.records", "reach.errors", "reach.names")


def _bad(module: str) -> bool:
    if module.split(".")[0] in FORBIDDEN:
        return True
    if module == "reach" or module.startswith("reach."):
        return not any(module == ok or module.startswith(ok + ".") for ok in ALLOWED_REACH)
    return False


def _problems() -> list[str]:
    return offending(sorted(CORE.rglob("*.py")), _bad)


def test_reach_core_imports_only_the_standard_library_pure_libraries_and_core_records_errors_names() -> None:
    problems = _problems()
    assert not problems, "reach.core must stay pure (reach/core/__init__.py), these imports break it:\n" + "\n".join(
        problems)


def test_the_check_sees_the_core_modules() -> None:
    assert (CORE / "routing.py").is_file() and len(list(CORE.rglob("*.py"))) > 10


def test_the_check_resolves_relative_imports_and_names_imported_from_reach() -> None:
    def bad(source: str, where: Path) -> list[str]:
        node = ast.parse(source).body[0]
        assert isinstance(node, ast.Import | ast.ImportFrom)
        return [module for module in _imported(where, node) if _bad(module)]

    module = CORE / "health" / "calls.py"
    assert bad("from ... import codec", module) == ["reach.codec"]
    assert bad("from ..retry import Failure", module) == []
    assert bad("from . import windows", module) == []
    assert bad("from reach import records, dlq", module) == ["reach.dlq"]
    assert bad("import redis.asyncio", module) == ["redis.asyncio"]
    assert bad("from faust import App", module) == ["faust"]
    assert bad("from reach.streams.health.writer import HealthWriter", module) == [
        "reach.streams.health.writer.HealthWriter"]
    assert bad("from semver import Version", module) == []
