"""`reach handoff resolve` needs exactly one of --answer / --capability (exit 2, nothing written)."""

from __future__ import annotations

from typer.testing import CliRunner

from reach.cli import app
from reach.cli.common import exit_code_for
from reach.intent.errors import IntentError


def test_resolve_needs_exactly_one_way_out() -> None:
    for extra in ([], ["--answer", "42", "--capability", "a.b"]):
        result = CliRunner().invoke(app, ["handoff", "resolve", "m-1", *extra])
        assert isinstance(result.exception, IntentError) and exit_code_for(result.exception) == 2
        assert "exactly one of --answer" in str(result.exception)


def test_the_loser_of_a_handoff_race_exits_2() -> None:
    from reach.intent.errors import HandoffConflict
    assert exit_code_for(HandoffConflict("moved by another operator")) == 2
