"""`reach send`: usage errors (exit 2) before anything is sent (--intent, --execution-timeout)."""

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


def test_a_negative_or_absurd_execution_timeout_is_a_usage_error() -> None:
    assert "--execution-timeout" in _usage_error(["send", "demo.slow", "--payload", "{}", "--execution-timeout", "-5s"])
    assert "from 1 to 3,600,000" in _usage_error(["send", "demo.slow", "--payload", "{}",
                                                  "--execution-timeout", "2h"])
