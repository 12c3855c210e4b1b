"""One-way dependencies between subsystems (docs/architecture.md, "Dependency rules"): a hosted subsystem never
imports its host, the interfaces share use cases through reach.ops and never each other's modules. Every import
statement counts, also one inside a function or under TYPE_CHECKING; a failure names file:line: import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.unit.import_rules import ROOT, offending
from tests.unit.import_rules import imported as _imported

REACH = ROOT / "reach"

SHARED = ("reach/callers.py", "reach/signing.py", "reach/apps.py", "reach/appstore.py", "reach/secretbox.py")
INTERFACES = ("reach.cli", "reach.console", "reach.gateway", "reach.a2a", "reach.mcp")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _files(*where: str) -> list[Path]:
    found: list[Path] = []
    for name in where:
        path = ROOT / name
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def _crossings(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    """file:line: import (module) for every import in `files` of a module within one of the `forbidden` packages."""
    return offending(files, lambda module: any(_within(module, package) for package in forbidden))


def _check(files: list[Path], forbidden: tuple[str, ...], rule: str) -> None:
    assert files, f"no files for the rule: {rule}"
    problems = _crossings(files, forbidden)
    assert not problems, f"{rule}; these imports break it:\n" + "\n".join(problems)


def test_channels_never_import_the_gateway() -> None:
    _check(_files("reach/channels"), ("reach.gateway",),
           "channels never import the gateway (request signing is reach.signing, shared)")


def test_a2a_never_imports_the_gateway() -> None:
    _check(_files("reach/a2a"), ("reach.gateway",),
           "A2A never imports the gateway that hosts it (what it needs is reach.a2a.ports.Host, passed in)")


def test_mcp_never_imports_the_gateway() -> None:
    _check(_files("reach/mcp"), ("reach.gateway", "reach.a2a"),
           "MCP never imports the gateway that hosts it (what it needs is reach.mcp.ports.Host, passed in), "
           "nor A2A, another interface")


def test_the_console_never_imports_the_gateway() -> None:
    _check(_files("reach/console"), ("reach.gateway",),
           "the console never imports the gateway that hosts it (reach.gateway.wiring.open_console builds its port)")


def test_the_status_fold_and_the_router_reach_channels_and_intent_through_ports() -> None:
    _check(_files("reach/streams/status", "reach/streams/router"), ("reach.channels", "reach.intent"),
           "the status fold and the router never import channels or intent: they get reach.streams.status.ports."
           "Callbacks and reach.streams.router.ports.Handoff from the stream app's wiring")


def test_the_runtime_never_imports_the_tooling() -> None:
    files = [p for p in _files("reach")
             if not p.is_relative_to(REACH / "tooling") and not p.is_relative_to(REACH / "cli")]
    _check(files, ("reach.tooling",), "the runtime never imports the tooling (bench, demo, faults, local): only "
           "the CLI, which runs them")


def test_only_the_cli_and_the_entry_point_import_the_cli() -> None:
    allowed = {REACH / "__main__.py"}  # the entry point
    files = [p for p in _files("reach") if not p.is_relative_to(REACH / "cli") and p not in allowed]
    _check(files, ("reach.cli",), "nothing outside reach/cli imports reach.cli (use cases are in reach.ops)")


def test_use_cases_import_no_interface() -> None:
    _check(_files("reach/ops"), INTERFACES, "reach.ops is below every interface: it imports no CLI, console, "
           "gateway or A2A module")


def test_the_shared_caller_modules_import_no_interface() -> None:
    _check(_files(*SHARED), INTERFACES, "the modules the gateway, A2A, the console and channels share "
           f"({', '.join(SHARED)}) import none of them")


def test_the_core_never_imports_confluent_kafka() -> None:
    _check(_files("reach/core"), ("confluent_kafka",),
           "reach.core never imports confluent_kafka (it is pure; the Kafka plumbing is reach.kafka)")


@pytest.mark.parametrize(("source", "where", "expected"), [
    ("from reach.gateway import checks", "reach/a2a/handler.py", ["reach.gateway.checks"]),
    ("from ..gateway.ports import Quotas", "reach/a2a/handler.py", ["reach.gateway.ports.Quotas"]),
    ("from . import tasks", "reach/a2a/handler.py", []),
    ("import reach.gateway.signing", "reach/channels/webhook.py", ["reach.gateway.signing"]),
    ("from reach import gateway, codec", "reach/console/backend.py", ["reach.gateway"]),
    ("from reach.gatewayish import x", "reach/console/backend.py", []),
])
def test_the_check_resolves_relative_and_package_imports(source: str, where: str, expected: list[str]) -> None:
    node = ast.parse(source).body[0]
    assert isinstance(node, ast.Import | ast.ImportFrom)
    assert [m for m in _imported(ROOT / where, node) if _within(m, "reach.gateway")] == expected


def test_no_shell_module_shares_its_name_with_a_core_module() -> None:
    # a pure decision and the shell that acts on it had the same name at two levels (retry.py, admission.py,
    # progress.py, views/control.py): which one a reader opened depended on the import. The interfaces (cli, ops)
    # name their modules after the use case on purpose, the tooling is apart, and `settings` is a role, not a twin.
    core = {p.stem for p in (REACH / "core").rglob("*.py") if p.stem != "__init__"}
    exempt = (REACH / "core", REACH / "cli", REACH / "ops", REACH / "tooling")
    twins = [str(p.relative_to(ROOT)) for p in REACH.rglob("*.py")
             if p.stem in core and p.stem != "settings" and not any(p.is_relative_to(x) for x in exempt)]
    assert not twins, f"shell modules named like a reach.core module: {twins}"


def _runtime() -> list[Path]:
    """reach/ minus reach/kafka (the one Kafka layer) and reach/tooling (it measures Kafka itself: the bench's plain
    confluent-kafka peer must stay plain)."""
    return [p for p in _files("reach")
            if not p.is_relative_to(REACH / "kafka") and not p.is_relative_to(REACH / "tooling")]


def test_no_runtime_module_outside_reach_kafka_imports_confluent_kafka() -> None:
    _check(_runtime(), ("confluent_kafka",), "runtime modules read and write Kafka through reach.kafka (its worker, "
           "clients, topicreader, election; types from reach.kafka.types), never confluent_kafka itself")
