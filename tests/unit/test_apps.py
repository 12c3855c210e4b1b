"""Apps as records: create, rotate, revoke through AppStore over an in-memory log; the live-key table."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.apps import AppError, AppTable, new_app
from reach.appstore import AppStore, MemoryAppLog
from reach.callers import AppDirectory
from reach.errors import InvalidName
from reach.kafka import codec
from reach.records import App
from reach.secretbox import SecretBox, SecretUnreadable

BOX = SecretBox([SecretStr(Fernet.generate_key().decode())])


def _store() -> tuple[AppStore, MemoryAppLog]:
    log = MemoryAppLog()
    return AppStore(log=log, box=BOX, by="test"), log


def _table(log: MemoryAppLog) -> AppTable:
    table = AppTable(BOX)
    for record in log.records:  # through the wire format, as the directory reads them
        assert table.apply_raw(record.app_id.encode(), codec.encode(record), where="test")
    return table


def test_create_writes_one_record_with_a_sealed_secret_and_the_table_serves_it() -> None:
    store, log = _store()
    made = store.create(name="billing", tenant="acme", capabilities=["search.web", "search.web"], rate=5.0,
                        burst=10)
    [record] = log.records
    assert record.app_id == made.app_id and [k.key_id for k in record.keys] == [made.key_id]
    assert made.secret.encode() not in codec.encode(record)
    assert record.capabilities == ["search.web"] and record.updated_by == "test"
    entry = _table(log).lookup(made.key_id)
    assert entry is not None and entry.secret == made.secret.encode()
    assert (entry.app.tenant, entry.app.rate, entry.app.burst) == ("acme", 5.0, 10)
    assert entry.app.may_call("search.web") and not entry.app.may_call("search.news")
    directory: AppDirectory = _table(log)
    assert directory.lookup("key_unknown") is None


def test_rotation_adds_a_key_and_both_work_until_the_old_is_revoked() -> None:
    store, log = _store()
    first = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    second = store.rotate(first.app_id)
    table = _table(log)
    assert table.lookup(first.key_id) is not None and table.lookup(second.key_id) is not None
    store.revoke(first.app_id, key_id=first.key_id)
    table.apply(first.app_id, log.records[-1])
    assert table.lookup(first.key_id) is None and table.lookup(second.key_id) is not None
    with pytest.raises(AppError, match="already revoked"):
        store.revoke(first.app_id, key_id=first.key_id)


def test_revoking_the_app_removes_every_key_and_it_stays_revoked() -> None:
    store, log = _store()
    first = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    second = store.rotate(first.app_id)
    table = _table(log)
    revoked = store.revoke(first.app_id)
    assert revoked.revoked and revoked.live_keys() == []
    table.apply(first.app_id, log.records[-1])
    assert table.lookup(first.key_id) is None and table.lookup(second.key_id) is None
    for change in (lambda: store.rotate(first.app_id), lambda: store.revoke(first.app_id)):
        with pytest.raises(AppError, match="is revoked"):
            change()


def test_a_tombstone_removes_the_app() -> None:
    store, log = _store()
    made = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    table = _table(log)
    assert table.apply_raw(made.app_id.encode(), None, where="test")
    assert table.lookup(made.key_id) is None and table.apps() == {}


def test_unknown_apps_and_keys_say_where_to_look() -> None:
    store, _ = _store()
    with pytest.raises(AppError, match="reach apps ls"):
        store.rotate("app_nope")
    made = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    with pytest.raises(AppError, match=f"expected one of {made.key_id}"):
        store.revoke(made.app_id, key_id="key_nope")


@pytest.mark.parametrize(
    ("changes", "error", "says"),
    [
        ({"name": ""}, AppError, "App name"),
        ({"name": "x" * 101}, AppError, "App name"),
        ({"tenant": "a b"}, AppError, "Tenant"),
        ({"capabilities": ["Not A Cap"]}, InvalidName, "Capability"),
        ({"rate": 0.0}, AppError, "rate > 0"),
        ({"rate": float("nan")}, AppError, "rate > 0"),
        ({"burst": 0}, AppError, "burst >= 1"),
    ],
)
def test_bad_app_fields_are_refused(changes: dict[str, object], error: type[Exception], says: str) -> None:
    fields: dict[str, object] = {"name": "a", "tenant": "t", "capabilities": [], "rate": 1.0, "burst": 1,
                                 **changes}
    with pytest.raises(error, match=says):
        new_app(BOX, now_ms=0, by="test", **fields)  # type: ignore[arg-type]


def _record(**changes: object) -> App:
    app, _ = new_app(BOX, name="a", tenant="t", capabilities=[], rate=1, burst=1, now_ms=0, by="test")
    return app.model_copy(update=changes)


def test_bad_records_are_skipped_counted_and_keep_the_previous_state() -> None:
    good = _record()
    table = AppTable(BOX)
    assert table.apply_raw(good.app_id.encode(), codec.encode(good), where="t@0")
    key_id = good.keys[0].key_id
    foreign = SecretBox([SecretStr(Fernet.generate_key().decode())])
    resealed = good.model_copy(update={"keys": [good.keys[0].model_copy(
        update={"sealed_secret": foreign.seal(good.app_id, key_id, b"x")})]})
    other = _record()
    thief = other.model_copy(update={"keys": [*other.keys, good.keys[0]]})  # claims good's key id
    bad = [
        (good.app_id.encode(), b"not avro"),
        (b"\xff\xfe", codec.encode(good)),
        (b"", codec.encode(good)),
        (b"app_other", codec.encode(good)),  # key and app_id differ
        (good.app_id.encode(), codec.encode(resealed)),  # sealed under another secrets key
        (other.app_id.encode(), codec.encode(thief)),
        (good.app_id.encode(), codec.encode(good.model_copy(update={"rate": 0.0}))),
        (good.app_id.encode(), codec.encode(good.model_copy(update={"burst": 0}))),
    ]
    for key, value in bad:
        assert not table.apply_raw(key, value, where="t@1")
    assert table.refused == len(bad)
    entry = table.lookup(key_id)
    assert entry is not None and entry.app.app_id == good.app_id
    assert table.lookup(other.keys[0].key_id) is None


def test_an_unreadable_new_key_does_not_hold_back_the_revocation_in_the_same_record() -> None:
    store, log = _store()
    first = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    second = store.rotate(first.app_id)
    table = _table(log)
    # another gateway (another secrets key) rotated and revoked the first key in one record
    foreign = SecretBox([SecretStr(Fernet.generate_key().decode())])
    record = store.revoke(first.app_id, key_id=first.key_id)
    unreadable = record.keys[0].model_copy(update={"key_id": "key_new", "revoked_at": None,
                                                   "sealed_secret": foreign.seal(first.app_id, "key_new", b"x")})
    record = record.model_copy(update={"keys": [*record.keys, unreadable]})
    assert not table.apply_raw(first.app_id.encode(), codec.encode(record), where="t@9")
    assert table.refused == 1
    assert table.lookup(first.key_id) is None  # revoked: gone although the record was skipped
    assert table.lookup(second.key_id) is not None and table.lookup("key_new") is None
    assert table.apply(first.app_id, record.model_copy(update={"revoked_at": 1}))  # revoked: no secret to open
    assert table.lookup(second.key_id) is None


def test_listing_and_revoking_need_no_secrets_key_making_keys_does() -> None:
    store, log = _store()
    made = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    keyless = AppStore(log=log, box=None, by="test")
    assert [a.app_id for a in keyless.all()] == [made.app_id]
    with pytest.raises(AppError, match="needs the secrets key"):
        keyless.rotate(made.app_id)
    with pytest.raises(AppError, match="needs the secrets key"):
        keyless.create(name="b", tenant="t", capabilities=[], rate=1, burst=1)
    assert keyless.revoke(made.app_id).revoked


def test_rotating_with_another_secrets_key_is_refused_before_anything_is_written() -> None:
    store, log = _store()
    made = store.create(name="a", tenant="t", capabilities=[], rate=1, burst=1)
    elsewhere = AppStore(log=log, box=SecretBox([SecretStr(Fernet.generate_key().decode())]), by="test")
    with pytest.raises(SecretUnreadable, match="REACH_GATEWAY_SECRETS_KEY"):
        elsewhere.rotate(made.app_id)
    assert len(log.records) == 1


def test_a_quota_change_keeps_the_keys_and_names_who_made_it() -> None:
    from reach.ops import apps as ops_apps

    store, log = _store()
    made = store.create(name="shop", tenant="t", capabilities=[], rate=10, burst=10)
    changed = ops_apps.set_quota(AppStore(log=log, box=None, by="console:ana"), made.app_id, rate=20)
    assert (changed.rate, changed.burst, changed.updated_by) == (20, 10, "console:ana")
    entry = _table(log).lookup(made.key_id)
    assert entry is not None and (entry.app.rate, entry.app.burst) == (20, 10)
    for rate, burst, says in ((0, None, "is invalid"), (None, 0, "is invalid"), (None, None, "give a new rate")):
        with pytest.raises(AppError, match=says):
            ops_apps.set_quota(store, made.app_id, rate=rate, burst=burst)
    store.revoke(made.app_id)
    with pytest.raises(AppError, match="is revoked"):
        ops_apps.set_quota(store, made.app_id, rate=5)
    assert len(log.records) == 3  # create, quota, revoke: no refused change was written
