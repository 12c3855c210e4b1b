"""Console operators (`reach operators`): create shows the token once, the listing never; revoke ends it once."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.apps import AppError
from reach.appstore import MemoryAppLog
from reach.ops import operators as ops
from reach.secretbox import SecretBox


@pytest.fixture
def store() -> ops.OperatorStore:
    box = SecretBox([SecretStr(Fernet.generate_key().decode())])
    return ops.OperatorStore(log=MemoryAppLog(), box=box, by="tester")


def test_create_shows_the_token_once_and_the_listing_never(store: ops.OperatorStore) -> None:
    made = ops.create(store, name="alice", role="viewer")
    assert ops.token(made, name="alice", role="viewer") == {"operator_id": made.operator_id, "name": "alice",
                                                            "role": "viewer", "token": made.token}
    [record] = ops.listing(store)
    summary = ops.summary(record)
    assert (summary["operator_id"], summary["role"], summary["redrive_rate"], summary["updated_by"]) == (
        made.operator_id, "viewer", ops.DEFAULT_REDRIVE_RATE, "tester")
    assert summary["key_ids"] == [made.key_id] and made.token.split(".")[1] not in json.dumps(summary)


def test_a_bad_role_is_refused_with_the_roles_there_are(store: ops.OperatorStore) -> None:
    with pytest.raises(AppError, match="viewer, admin"):
        ops.create(store, name="x", role="root")
    assert ops.listing(store) == []


def test_revoke_ends_an_operator_once(store: ops.OperatorStore) -> None:
    made = ops.create(store, name="bob", role="admin", redrive_rate=3)
    done = ops.revoke(store, made.operator_id)
    assert done.revoked and ops.summary(done)["revoked_at"] is not None
    with pytest.raises(AppError, match="already revoked"):
        ops.revoke(store, made.operator_id)
    with pytest.raises(AppError, match="No operator 'op_none'"):
        ops.revoke(store, "op_none")
