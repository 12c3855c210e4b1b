"""App secrets at rest: Fernet-encrypted under a key from the settings, or a key file made once.

The key is REACH_GATEWAY_SECRETS_KEY (comma-separated Fernet keys: the first encrypts, every one decrypts,
so an operator rotates it by prepending a new key). Unset, it is REACH_HOME/gateway-secrets.key: the CLI
creates that file (0600) on a fresh machine; the gateway only reads it, so a gateway started with the wrong
key or none refuses to start instead of writing secrets nobody else can read.
"""

from __future__ import annotations

import os
import secrets as _random
import stat
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from pydantic import SecretStr

from reach.errors import ConfigError, ReachError

KEY_FILE = "gateway-secrets.key"


class SecretUnreadable(ReachError):
    """A stored secret does not decrypt under any configured key (or belongs to another key id)."""


class SecretBox:
    """Seals and opens app secrets; the plaintext names its app and key, so a sealed secret copied onto
    another app's record does not open there."""

    def __init__(self, keys: list[SecretStr]) -> None:
        if not keys:
            raise ConfigError("No secrets key: expected at least one Fernet key in REACH_GATEWAY_SECRETS_KEY.")
        try:
            self._fernet = MultiFernet([Fernet(k.get_secret_value().strip().encode()) for k in keys])
        except ValueError:
            raise ConfigError("REACH_GATEWAY_SECRETS_KEY is not a list of Fernet keys (32 url-safe base64 "
                              "bytes each, comma-separated); make one with `python -c 'from cryptography."
                              "fernet import Fernet; print(Fernet.generate_key().decode())'`.") from None

    @staticmethod
    def _bound(app_id: str, key_id: str, secret: bytes) -> bytes:
        return f"{app_id}/{key_id}\n".encode() + secret

    def seal(self, app_id: str, key_id: str, secret: bytes) -> bytes:
        return self._fernet.encrypt(self._bound(app_id, key_id, secret))

    def open(self, app_id: str, key_id: str, token: bytes) -> bytes:
        """The secret; SecretUnreadable when no key decrypts it or it was sealed for another key."""
        try:
            plain = self._fernet.decrypt(token)
        except InvalidToken:
            raise SecretUnreadable(f"The secret of key {key_id} (app {app_id}) does not decrypt under "
                                   "REACH_GATEWAY_SECRETS_KEY: expected the key the CLI used when it created "
                                   "it; set the same key on every gateway and CLI.") from None
        prefix = self._bound(app_id, key_id, b"")
        if not plain.startswith(prefix):
            raise SecretUnreadable(f"The sealed secret on key {key_id} (app {app_id}) was sealed for another "
                                   "key: the record was tampered with; revoke the key and rotate.")
        return plain[len(prefix):]


def new_secret() -> str:
    """A fresh app secret as shown to the operator once; its UTF-8 bytes are the HMAC key."""
    return "rs_" + _random.token_urlsafe(32)


def _read_key_file(path: Path) -> SecretStr:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path} is readable by other users (mode {stat.S_IMODE(mode):o}): expected 0600; "
                          f"run `chmod 600 {path}`.")
    return SecretStr(path.read_text().strip())


def _create_key_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, Fernet.generate_key() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic and never replaces: two CLIs racing on a fresh machine share one key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def secret_box(configured: SecretStr | None, home: Path, *, create: bool) -> SecretBox:
    """The box for REACH_GATEWAY_SECRETS_KEY, else for the key file under `home` (made when `create`)."""
    if configured is not None:
        return SecretBox([SecretStr(k) for k in configured.get_secret_value().split(",") if k.strip()])
    path = home / KEY_FILE
    if not path.exists():
        if not create:
            raise ConfigError(f"No secrets key: REACH_GATEWAY_SECRETS_KEY is unset and {path} does not exist. "
                              "Create an app first (`reach apps create`, which makes the key file), or set "
                              "REACH_GATEWAY_SECRETS_KEY to the key the CLI uses.")
        _create_key_file(path)
    return SecretBox([_read_key_file(path)])
