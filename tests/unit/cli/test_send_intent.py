"""`reach send --intent`: usage errors (exit 2) before anything is sent."""

from __future__ import annotations

from typer.testing import CliRunner

from reach.cli import app
from reach.cli.common import exit_code_for
from reach.errors import ReachError


def _usage_error(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ReachError) and exit_code_for(result.exception) == 2
    return str(result.exception)


def test_intent_and_capability_together_or_neither_are_usage_errors() -> None:
    assert "not both" in _usage_error(["send", "demo.echo", "--intent", "rain?", "--payload", "{}"])
    assert "--intent" in _usage_error(["send", "--payload", "{}"])
