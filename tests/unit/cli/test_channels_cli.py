"""`reach send --callback` refuses a malformed spec before anything is sent (exit 2, the reason);
`reach channels list --json` is the catalog; `reach channels [--json]` is the health board (exit 4 without Redis)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from reach.channels.catalog import CHANNELS
from reach.cli import app


@pytest.mark.parametrize(("args", "says"), [
    (["--callback", "webhook:ftp://nope"], "not an http(s) URL"),
    (["--callback", "webhook:https://h.example/x", "--callback-fields", "$.[[["], "not valid JSONPath"),
    (["--callback-fields", "$.a"], "without a callback"),
])
def test_send_refuses_a_bad_callback_with_exit_2(args: list[str], says: str) -> None:
    # no broker listens at REACH_BOOTSTRAP: exit 2 (not 4, unreachable) shows the spec was refused before any send
    done = subprocess.run([sys.executable, "-m", "reach", "send", "demo.echo", "--payload", "{}", *args],
                          capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "REACH_BOOTSTRAP": "127.0.0.1:9"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stdout + done.stderr


def test_channels_list_json_is_the_catalog() -> None:
    result = CliRunner().invoke(app, ["channels", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert [row["capability"] for row in json.loads(result.output)] == [c.capability for c in CHANNELS]


def test_the_timeline_names_the_channel_of_a_delivery_step() -> None:
    from rich.console import Console

    from reach.cli.status import _timeline

    row = {"message_id": "m-cb0", "capability": "channel.webhook", "status": "COMPLETED", "timeline": [
        {"generation": 0, "attempt": 1, "status": "SENT", "at": 1, "instance_id": "i1",
         "channel": {"channel": "webhook", "provider_message_id": "rcv-1", "callback_id": None}},
        {"generation": 0, "attempt": 1, "status": "COMPLETED", "at": 2, "instance_id": "i1"}]}
    console = Console(width=200, record=True)
    console.print(_timeline(row))
    text = console.export_text()
    assert "SENT via webhook rcv-1" in text and "COMPLETED" in text


def test_channels_health_without_redis_is_exit_4() -> None:
    done = subprocess.run([sys.executable, "-m", "reach", "channels", "--json"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "REACH_REDIS_URL": "redis://127.0.0.1:9/0"})
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Redis did not answer" in done.stdout + done.stderr


def test_channels_health_prints_the_board(monkeypatch: pytest.MonkeyPatch) -> None:
    from reach.channels import board, boardread
    from reach.channels.health import ChannelHealth

    snap = board.snapshot(ChannelHealth(), channel="sms", instance_id="i1", agent_id="a", now=5)
    monkeypatch.setattr(boardread, "read_board", lambda *_: [snap])
    result = CliRunner().invoke(app, ["channels", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == board.rows([snap])
    table = CliRunner().invoke(app, ["channels"])
    assert "sms" in table.output and "HEALTHY" in table.output
