"""Operators: App v2 records with a role, their tokens, and the two tables that never mix them up."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.apps import AppError, AppTable, new_app
from reach.appstore import AppStore, MemoryAppLog
from reach.console.operators import OperatorTable
from reach.ops.operators import OperatorStore, Role, new_operator, split_token
from reach.secretbox import SecretBox


@pytest.fixture
def box() -> SecretBox:
    return SecretBox([SecretStr(Fernet.generate_key().decode())])


def test_a_token_verifies_as_its_operator_and_nothing_else_does(box: SecretBox) -> None:
    record, made = new_operator(box, name="alice", role="viewer", redrive_rate=5, now_ms=1, by="t")
    table = OperatorTable(box)
    assert table.apply(record.app_id, record)
    operator = table.verify(made.token)
    assert operator is not None and operator.role is Role.VIEWER and not operator.admin
    assert operator.name == "alice" and operator.redrive_rate == 5
    key_id, secret = split_token(made.token) or ("", "")
    assert table.verify(f"{key_id}.{secret}x") is None
    assert table.verify(f"{key_id}.") is None and table.verify("") is None and table.verify(None) is None
    assert table.verify("key_abc.def") is None  # an app key id is never an operator token


def test_the_door_never_accepts_an_operator_key_and_the_console_never_an_app_key(box: SecretBox) -> None:
    operator, made = new_operator(box, name="root", role="admin", redrive_rate=5, now_ms=1, by="t")
    app, app_key = new_app(box, name="shop", tenant="acme", capabilities=[], rate=1, burst=1, now_ms=1, by="t")
    door, console = AppTable(box), OperatorTable(box)
    for table in (door, console):
        table.apply(operator.app_id, operator)
        table.apply(app.app_id, app)
    assert door.lookup(made.key_id) is None and door.lookup(app_key.key_id) is not None
    assert console.lookup(app_key.key_id) is None and console.verify(made.token) is not None
    assert console.verify(f"{app_key.key_id}.{app_key.secret}") is None


def test_revoking_an_operator_stops_its_token_and_the_apps_store_does_not_list_it(box: SecretBox) -> None:
    log = MemoryAppLog()
    store = OperatorStore(log=log, box=box, by="t")
    made = store.create(name="bob", role="admin", redrive_rate=10, now_ms=5)
    assert [o.name for o in store.all()] == ["bob"]
    assert AppStore(log=log, box=box).all() == []
    with pytest.raises(AppError):
        AppStore(log=log, box=box).revoke(made.operator_id)  # `reach apps` does not manage operators
    table = OperatorTable(box)
    table.apply(made.operator_id, log.read()[made.operator_id])
    assert table.verify(made.token) is not None
    store.revoke(made.operator_id, now_ms=6)
    table.apply(made.operator_id, log.read()[made.operator_id])
    assert table.verify(made.token) is None
    with pytest.raises(AppError, match="already revoked"):
        store.revoke(made.operator_id, now_ms=7)


def test_bad_roles_names_and_rates_are_refused(box: SecretBox) -> None:
    with pytest.raises(AppError, match="viewer, admin"):
        new_operator(box, name="x", role="root", redrive_rate=1, now_ms=1, by="t")
    with pytest.raises(AppError, match="name"):
        new_operator(box, name=" ", role="viewer", redrive_rate=1, now_ms=1, by="t")
    with pytest.raises(AppError, match="rate"):
        new_operator(box, name="x", role="viewer", redrive_rate=0, now_ms=1, by="t")
    with pytest.raises(AppError, match="secrets key"):
        OperatorStore(log=MemoryAppLog(), box=None, by="t").create(name="x", role="viewer", redrive_rate=1, now_ms=1)


def test_a_role_this_version_does_not_know_grants_nothing(box: SecretBox) -> None:
    record, made = new_operator(box, name="x", role="admin", redrive_rate=1, now_ms=1, by="t")
    table = OperatorTable(box)
    table.apply(record.app_id, record.model_copy(update={"role": "superuser"}))
    assert table.verify(made.token) is None


def test_a_session_expires_and_closes_only_with_its_csrf_token() -> None:
    from reach.console.sessions import MemorySessions

    now = [0.0]
    sessions = MemorySessions(ttl_s=60, clock=lambda: now[0], limit=3)
    first = sessions.open("opk_a.secret")
    assert sessions.get(first.session_id) == first and first.token not in repr(first)
    assert not sessions.close(first.session_id, "wrong") and sessions.get(first.session_id) == first
    assert sessions.close(first.session_id, first.csrf) and sessions.get(first.session_id) is None
    second = sessions.open("opk_a.secret")
    now[0] = 60.0
    assert sessions.get(second.session_id) is None  # expired
    opened = [sessions.open("opk_b.secret") for _ in range(5)]
    assert sessions.get(opened[0].session_id) is None and sessions.get(opened[-1].session_id) == opened[-1]
