"""Settings enter at the edge (docs/architecture.md, "Dependency rules"): only the entry points build settings from
the environment; every other module receives them as arguments. The check parses every module of reach/ and fails
with file:line: code on a `*Settings()` (or any pydantic-settings class) built with no arguments, a read of
`os.environ` / `os.getenv`, or a `from_env()`-style loader outside the entry points below."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.unit.import_rules import ROOT

REACH = ROOT / "reach"

# Entry points: each builds its settings once and passes them down.
ENTRY_POINTS = (
    "reach/__main__.py",
    "reach/cli/",  # every command function
    "reach/streams/app.py",  # build_app, the stream app's
    "reach/agent/agent.py",  # Agent.run, an agent program's (and REACH_AGENT_METRICS_PORT)
    "reach/client.py",  # Client, a caller's program's: the SDK a user constructs
    "reach/tooling/",  # tooling: bench, demo, faults, local, each its own program
)

# Reads of the process environment that are not settings, each with why.
ENVIRONMENT_USES = {
    "reach/intent/model.py": "sets OPENBLAS_NUM_THREADS for numpy before it loads, reads no setting",
    "reach/streams/groupadmin.py": "hands the parent's environment to the group-admin child it spawns",
}

_LOADER = re.compile(r"(^|_)from_env(iron|ironment)?$")
_ENV_NAMES = {"environ", "environb", "getenv", "getenvb"}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _is_entry(path: Path) -> bool:
    rel = _rel(path)
    return any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in ENTRY_POINTS)


def env_settings_classes(files: list[Path]) -> set[str]:
    """The names of the classes of `files` that read the environment when built (pydantic-settings subclasses)."""
    bases: dict[str, set[str]] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(_name(b) for b in node.bases)
    found = {"BaseSettings"}
    while True:
        more = {name for name, of in bases.items() if of & found} - found
        if not more:
            return found - {"BaseSettings"}
        found |= more


def _name(func: ast.expr) -> str:
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def environment_reads(path: Path, source: str, env_classes: set[str]) -> list[str]:
    """file:line: code for each place in `source` that builds settings from, or reads, the environment."""
    found = []
    rel = _rel(path)
    for node in ast.walk(ast.parse(source, filename=rel)):
        why = ""
        if isinstance(node, ast.Call):
            name = _name(node.func)
            if not node.args and not node.keywords and (name.endswith("Settings") or name in env_classes):
                why = "settings built from the environment"
            elif _LOADER.search(name):
                why = "an environment loader"
        elif isinstance(node, ast.Attribute) and node.attr in _ENV_NAMES and isinstance(node.value, ast.Name) \
                and node.value.id == "os" and rel not in ENVIRONMENT_USES:
            why = "reads the environment"
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and rel not in ENVIRONMENT_USES \
                and any(a.name in _ENV_NAMES for a in node.names):
            why = "reads the environment"
        if why:
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)} ({why})")
    return found


def _modules() -> list[Path]:
    return sorted(REACH.rglob("*.py"))


def test_only_the_entry_points_read_the_environment() -> None:
    files = _modules()
    env_classes = env_settings_classes(files)
    problems = [problem for path in files if not _is_entry(path)
                for problem in environment_reads(path, path.read_text(encoding="utf-8"), env_classes)]
    assert not problems, ("settings are built once at an entry point (" + ", ".join(ENTRY_POINTS) + ") and passed "
                          "down; these modules read the environment themselves:\n" + "\n".join(problems))


def test_the_entry_points_and_exemptions_exist() -> None:
    for entry in [*ENTRY_POINTS, *ENVIRONMENT_USES]:
        assert (ROOT / entry).exists(), f"{entry} is named by the settings rule but is gone: update the rule"


def test_the_pydantic_settings_classes_are_known() -> None:
    env_classes = env_settings_classes(_modules())
    assert {"ReachSettings", "KafkaSettings", "HealthEnvSettings", "Thresholds"} <= env_classes
    assert "HealthSettings" not in env_classes, "the core's health settings read no environment"


@pytest.mark.parametrize(("source", "flagged"), [
    ("kafka = kafka or KafkaSettings()", True),
    ("from reach import settings\nx = settings.ReachSettings()", True),
    ("t = Thresholds()", True),
    ("k = KafkaSettings(bootstrap='b:9092')", False),
    ("url = os.environ.get('REACH_REDIS_URL')", True),
    ("url = os.getenv('X')", True),
    ("from os import environ", True),
    ("s = HealthSettings.from_env()", True),
    ("r = RouteRequest.from_envelope(e)", False),
    ("h = HealthSettings(open_ms=5)", False),
])
def test_the_check_finds_environment_reads(source: str, flagged: bool) -> None:
    found = environment_reads(REACH / "gateway" / "example.py", source, {"Thresholds"})
    assert bool(found) is flagged, found
    assert all(p.startswith("reach/gateway/example.py:") for p in found)
