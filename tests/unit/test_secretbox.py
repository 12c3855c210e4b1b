"""App secrets at rest: sealed under the configured key(s), bound to their app and key, key file 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr

from reach.errors import ConfigError
from reach.secretbox import KEY_FILE, SecretBox, SecretUnreadable, new_secret, secret_box


def _key() -> SecretStr:
    return SecretStr(Fernet.generate_key().decode())


def test_a_sealed_secret_opens_only_for_its_app_and_key() -> None:
    box = SecretBox([_key()])
    sealed = box.seal("app_1", "key_1", b"s3cret")
    assert b"s3cret" not in sealed
    assert box.open("app_1", "key_1", sealed) == b"s3cret"
    for app_id, key_id in (("app_2", "key_1"), ("app_1", "key_2")):
        with pytest.raises(SecretUnreadable, match="sealed for another key"):
            box.open(app_id, key_id, sealed)


def test_another_secrets_key_cannot_open_it_and_the_error_names_the_setting() -> None:
    sealed = SecretBox([_key()]).seal("app_1", "key_1", b"s3cret")
    with pytest.raises(SecretUnreadable, match="REACH_GATEWAY_SECRETS_KEY") as caught:
        SecretBox([_key()]).open("app_1", "key_1", sealed)
    assert "s3cret" not in str(caught.value)


def test_the_secrets_key_rotates_by_prepending_a_new_one() -> None:
    old, new = _key(), _key()
    sealed_before = SecretBox([old]).seal("a", "k", b"x")
    rotated = secret_box(SecretStr(f"{new.get_secret_value()}, {old.get_secret_value()}"), Path("/nonexistent"),
                         create=False)
    assert rotated.open("a", "k", sealed_before) == b"x"
    assert SecretBox([new]).open("a", "k", rotated.seal("a", "k", b"y")) == b"y"  # the first key encrypts


def test_a_bad_key_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Fernet keys"):
        SecretBox([SecretStr("not-a-key")])
    with pytest.raises(ConfigError, match="at least one"):
        secret_box(SecretStr(" , "), Path("/nonexistent"), create=False)


def test_the_cli_makes_the_key_file_once_with_0600_and_the_gateway_only_reads_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        secret_box(None, tmp_path, create=False)
    sealed = secret_box(None, tmp_path, create=True).seal("a", "k", b"x")
    path = tmp_path / KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_box(None, tmp_path, create=True).open("a", "k", sealed) == b"x"  # not re-made
    assert secret_box(None, tmp_path, create=False).open("a", "k", sealed) == b"x"
    assert [p.name for p in tmp_path.iterdir()] == [KEY_FILE]  # no temporary file left behind


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    secret_box(None, tmp_path, create=True)
    os.chmod(tmp_path / KEY_FILE, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        secret_box(None, tmp_path, create=False)


def test_secrets_are_long_and_fresh() -> None:
    made = {new_secret() for _ in range(100)}
    assert len(made) == 100 and all(s.startswith("rs_") and len(s) >= 40 for s in made)
