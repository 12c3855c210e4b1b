"""Gateway apps (`reach apps`): create with the quota's defaults, list without secrets, rotate, revoke; over the
apps log in memory."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.apps import AppError
from reach.appstore import AppStore, MemoryAppLog
from reach.ops import apps as ops
from reach.ops import operators
from reach.secretbox import SecretBox


@pytest.fixture
def store() -> AppStore:
    return AppStore(log=MemoryAppLog(), box=SecretBox([SecretStr(Fernet.generate_key().decode())]), by="tester")


def test_capabilities_are_named_once_and_sorted() -> None:
    assert ops.capabilities(" b.two, a.one,,b.two ") == ["a.one", "b.two"]
    assert ops.capabilities(None) == [] and ops.capabilities("") == []


def test_create_takes_the_burst_from_the_rate_and_shows_the_secret_once(store: AppStore) -> None:
    made = ops.create(store, name="shop", tenant="acme", capabilities=["b.two", "a.one", "b.two"], rate=2.5)
    assert (made.burst, made.capabilities, made.rate) == (3, ["a.one", "b.two"], 2.5)
    shown = made.as_dict()
    assert list(shown) == ["app_id", "key_id", "secret", "name", "tenant", "capabilities", "rate", "burst"]
    assert (shown["name"], shown["tenant"], shown["secret"]) == ("shop", "acme", made.key.secret)
    [listed] = ops.listing(store)
    summary = ops.summary(listed)
    assert summary["app_id"] == made.key.app_id and summary["burst"] == 3 and summary["capabilities"] == ["a.one",
                                                                                                           "b.two"]
    assert made.key.secret not in json.dumps(summary) and "sealed_secret" not in json.dumps(summary)
    assert ops.create(store, name="tiny", tenant="acme", rate=0.2, burst=None).burst == 1
    assert ops.create(store, name="big", tenant="acme", rate=10, burst=50).burst == 50


def test_a_quota_that_cannot_make_a_bucket_is_refused(store: AppStore) -> None:
    with pytest.raises(AppError, match="Quota rate=inf"):
        ops.create(store, name="shop", tenant="acme", rate=float("inf"))
    assert ops.listing(store) == []


def test_rotate_adds_a_key_and_revoke_ends_one_then_the_app(store: AppStore) -> None:
    made = ops.create(store, name="shop", tenant="acme")
    new = ops.rotate(store, made.key.app_id)
    assert ops.secret(new) == {"app_id": made.key.app_id, "key_id": new.key_id, "secret": new.secret}
    one = ops.revoke(store, made.key.app_id, key_id=made.key.key_id)
    assert [k.key_id for k in one.live_keys()] == [new.key_id] and not one.revoked
    whole = ops.revoke(store, made.key.app_id)
    assert whole.revoked and ops.summary(whole)["revoked_at"] is not None


def test_operators_are_not_apps(store: AppStore) -> None:
    log = MemoryAppLog()
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    operators.create(operators.OperatorStore(log=log, box=box, by="t"), name="root", role="admin")
    assert ops.listing(AppStore(log=log, box=box)) == []


def test_an_app_names_its_owner_as_a_channel_target_and_can_change_or_drop_it(store: AppStore) -> None:
    made = ops.create(store, name="shop", tenant="acme", owner="email:shop-ops@example.com")
    app_id = made.key.app_id
    assert ops.summary(store.get(app_id))["owner"] == "email:shop-ops@example.com"
    with pytest.raises(AppError, match="not a channel target"):
        ops.update(store, app_id, owner="carrier-pigeon:roof")
    with pytest.raises(AppError, match="not a channel target"):
        ops.create(store, name="bad", tenant="acme", owner="ops@example.com")
    assert ops.update(store, app_id, owner="webhook:https://hooks.example.com/x").owner == \
        "webhook:https://hooks.example.com/x"
    assert ops.update(store, app_id, owner="none").owner is None
    with pytest.raises(AppError, match="--owner"):
        ops.update(store, app_id)
