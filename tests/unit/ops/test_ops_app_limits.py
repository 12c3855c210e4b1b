"""Spend limits of gateway apps: set at create, changed or removed by update, refused in a format the CLI does not
parse (exit 2, nothing written)."""

from __future__ import annotations

import json
import sys

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.apps import AppError, caller
from reach.appstore import AppStore, MemoryAppLog
from reach.cli import apps as cli
from reach.cli.common import run_guarded
from reach.core.spend import BadLimit
from reach.ops import apps as ops
from reach.secretbox import SecretBox


@pytest.fixture
def store() -> AppStore:
    return AppStore(log=MemoryAppLog(), box=SecretBox([SecretStr(Fernet.generate_key().decode())]), by="tester")


def test_limits_set_at_create_reach_the_door(store: AppStore) -> None:
    made = ops.create(store, name="shop", limit_cost=["5.00/day"], limit_tokens=["2M/month"])
    assert made.as_dict()["limits"] == ["5.00/day", "2000000/month"]
    [record] = store.all()
    assert [(x.kind, x.amount, x.period) for x in caller(record).limits] == [
        ("cost", 5_000_000, "day"), ("tokens", 2_000_000, "month")]
    assert ops.summary(record)["limits"] == ["5.00/day", "2000000/month"]


def test_update_changes_one_kind_and_none_removes_it(store: AppStore) -> None:
    made = ops.create(store, name="shop", limit_cost=["5/day"], limit_tokens=["1k/day"])
    app_id = made.key.app_id
    changed = ops.update(store, app_id, limit_tokens=["2k/day", "1M/month"])
    assert [(x.kind, x.amount, x.period) for x in changed.limits] == [
        ("cost", 5_000_000, "day"), ("tokens", 2_000, "day"), ("tokens", 1_000_000, "month")]
    cleared = ops.update(store, app_id, limit_cost=["none"])
    assert [x.kind for x in cleared.limits] == ["tokens", "tokens"] and store.get(app_id).limits == cleared.limits
    with pytest.raises(AppError, match="Nothing to update"):
        ops.update(store, app_id)


def test_a_bad_limit_writes_nothing(store: AppStore) -> None:
    with pytest.raises(BadLimit, match="AMOUNT/day"):
        ops.create(store, name="shop", limit_tokens=["lots"])
    assert store.all() == []


def test_the_cli_exits_2_on_a_limit_it_does_not_parse(store: AppStore, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "_store", lambda **_kw: store)
    app_id = ops.create(store, name="shop").key.app_id
    monkeypatch.setattr(sys, "argv", ["reach", "update", app_id, "--limit-cost", "5 dollars"])
    assert run_guarded(cli.app) == 2
    assert "is not a limit: expected AMOUNT/day or AMOUNT/month" in capsys.readouterr().err.replace("\n", "")
    assert store.get(app_id).limits == []
    monkeypatch.setattr(sys, "argv", ["reach", "update", app_id, "--limit-cost", "5.00/day", "--limit-tokens",
                                      "2M/month", "--json"])
    assert run_guarded(cli.app) == 0
    assert json.loads(capsys.readouterr().out)["limits"] == ["5.00/day", "2000000/month"]
