"""`reach handoff resolve` needs exactly one of --answer / --capability (exit 2, nothing written); a lost race
exits 2; `reach policy set --handoff` publishes the flag."""

from __future__ import annotations

import json
from typing import Any

import pytest
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


def test_policy_set_handoff_publishes_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach import control
    from reach.core.views.controlview import ControlView
    sent: list[Any] = []
    monkeypatch.setattr(control, "publish", lambda record, **_kw: sent.append(record))
    monkeypatch.setattr(control, "read_control", lambda **_kw: ControlView())
    result = CliRunner().invoke(app, ["policy", "set", "--capability", "billing.refund", "--handoff", "--json"])
    assert result.exit_code == 0, result.output
    [record] = sent
    assert record.key == "POLICY:billing.refund" and record.policy.handoff is True
    assert json.loads(result.output)["fields"]["handoff"]["from"] == "billing.refund"
