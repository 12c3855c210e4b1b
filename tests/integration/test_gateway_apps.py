"""Gateway apps on the real broker and quotas/nonces on the real Redis: `reach apps` as a subprocess, the
directory following the apps topic, and two "replicas" sharing one bucket and one nonce set."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from cryptography.fernet import Fernet
from redis.asyncio import Redis

from reach import signing
from reach.callers import CallerApp
from reach.errors import ConfigError
from reach.gateway.auth import REPLAY, SignatureAuthenticator
from reach.gateway.directory import KafkaAppDirectory
from reach.gateway.door import open_door
from reach.gateway.nonces import RedisNonceStore
from reach.gateway.ports import Verified
from reach.gateway.quotas import Limit, RedisQuotas
from reach.gateway.redisconn import door_client
from reach.gateway.settings import GatewaySettings
from reach.kafka import codec
from reach.names import Names
from reach.redisbatch import ScriptBatcher
from reach.secretbox import secret_box
from reach.settings import KafkaSettings, ReachSettings, RedisSettings

pytestmark = pytest.mark.integration
REACH = str(Path(sys.executable).with_name("reach"))
BODY = b'{"capability":"search.web","payload":{"q":"kafka"}}'

_LOOP = asyncio.new_event_loop()  # one loop for the module: the door's asyncio Redis clients live on it
run = _LOOP.run_until_complete


def _reach(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([REACH, "apps", *args], capture_output=True, text=True, timeout=120, env=os.environ)


def _json(*args: str) -> Any:
    done = _reach(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _until(condition: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def home(namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh REACH_HOME: the first `reach apps create` makes the secrets key file there."""
    monkeypatch.setenv("REACH_HOME", str(tmp_path))
    monkeypatch.delenv("REACH_GATEWAY_SECRETS_KEY", raising=False)
    return tmp_path


def _directory(namespace: str, home: Path) -> KafkaAppDirectory:
    directory = KafkaAppDirectory(names=Names(namespace), box=secret_box(None, home, create=False),
                                  kafka=KafkaSettings())
    directory.start(timeout=30)
    return directory


@pytest.fixture
def client() -> Iterator[Redis]:
    made = door_client(os.environ["REACH_REDIS_URL"])
    yield made
    run(made.aclose())


SIGNED: dict[str, Any] = {"method": "POST", "target": "/v1/envelopes", "body": BODY}


def _v2(secret: str, now: int) -> str:
    return signing.sign_request(secret.encode(), method="POST", target="/v1/envelopes", body=BODY, t=now,
                                nonce="n-" + uuid.uuid4().hex)


def _verified(auth: SignatureAuthenticator, key_id: str, secret: str) -> bool:
    header = _v2(secret, int(time.time()))
    outcome = run(auth.authenticate(key_id=key_id, signature=header, **SIGNED, now=int(time.time())))
    return isinstance(outcome, Verified)


def test_create_rotate_revoke_through_the_cli_and_the_directory_follows(namespace: str, home: Path,
                                                                        client: Redis) -> None:
    made = _json("create", "billing", "--tenant", "acme", "--capabilities", "search.web,search.news",
                 "--rate", "5", "--burst", "10")
    assert made["app_id"].startswith("app_") and made["secret"].startswith("rs_")
    directory = _directory(namespace, home)  # started after the create: reads it from the beginning
    try:
        auth = SignatureAuthenticator(directory=directory, nonces=RedisNonceStore(client=client, namespace=namespace))
        assert directory.ready
        entry = directory.lookup(made["key_id"])
        assert entry is not None and entry.app.tenant == "acme" and entry.app.capabilities == ("search.news",
                                                                                                "search.web")
        assert _verified(auth, made["key_id"], made["secret"])

        rotated = _json("rotate", made["app_id"])
        _until(lambda: directory.lookup(rotated["key_id"]) is not None, "the rotated key")
        assert _verified(auth, made["key_id"], made["secret"]) and _verified(auth, rotated["key_id"],
                                                                             rotated["secret"])

        listed = _reach("ls", "--json")
        assert made["secret"] not in listed.stdout and rotated["secret"] not in listed.stdout
        [row] = json.loads(listed.stdout)
        assert [k["key_id"] for k in row["keys"]] == [made["key_id"], rotated["key_id"]]

        revoke = _reach("revoke", made["app_id"], "--key", made["key_id"])
        assert revoke.returncode == 0, revoke.stderr
        _until(lambda: directory.lookup(made["key_id"]) is None, "the revoked key to disappear")
        assert not _verified(auth, made["key_id"], made["secret"])
        assert _verified(auth, rotated["key_id"], rotated["secret"])

        assert _reach("revoke", made["app_id"]).returncode == 0
        _until(lambda: directory.lookup(rotated["key_id"]) is None, "the revoked app to disappear")
        assert json.loads(_reach("ls", "--json").stdout)[0]["revoked_at"] is not None
        assert directory.refused == 0 and directory.alive
    finally:
        directory.stop()
    assert not directory.alive


def test_cli_errors_have_the_brief_s_exit_codes(namespace: str, home: Path) -> None:
    unknown = _reach("rotate", "app_nope")
    assert unknown.returncode == 2 and "reach apps ls" in unknown.stderr
    bad = _reach("create", "x", "--rate", "0")
    assert bad.returncode == 2 and "rate > 0" in bad.stderr
    made = _json("create", "a")
    again = _reach("revoke", made["app_id"], "--key", "key_nope")
    assert again.returncode == 2 and made["key_id"] in again.stderr
    other_key = {**os.environ, "REACH_GATEWAY_SECRETS_KEY": Fernet.generate_key().decode()}
    wrong = subprocess.run([REACH, "apps", "rotate", made["app_id"]], capture_output=True, text=True, timeout=120,
                           env=other_key)
    assert wrong.returncode == 2 and "REACH_GATEWAY_SECRETS_KEY" in wrong.stderr
    assert len(json.loads(_reach("ls", "--json").stdout)[0]["keys"]) == 1  # nothing was written
    revoked = subprocess.run([REACH, "apps", "revoke", made["app_id"]], capture_output=True, text=True,
                             timeout=120, env=other_key)
    assert revoked.returncode == 0, revoked.stderr  # revoking never needs the secrets key
    env = {**os.environ, "REACH_BOOTSTRAP": "127.0.0.1:1"}
    down = subprocess.run([REACH, "apps", "ls"], capture_output=True, text=True, timeout=120, env=env)
    assert down.returncode == 4 and "REACH_BOOTSTRAP" in down.stderr


def test_a_bad_record_on_the_apps_topic_is_skipped_and_counted(namespace: str, home: Path) -> None:
    first = _json("create", "first")
    producer = Producer(KafkaSettings().producer())
    producer.produce(Names(namespace).apps, key=b"app_garbage", value=b"not an App")
    assert producer.flush(15) == 0
    directory = _directory(namespace, home)
    try:
        assert directory.lookup(first["key_id"]) is not None and directory.refused == 1
        second = _json("create", "second")  # a record after the bad one still arrives
        _until(lambda: directory.lookup(second["key_id"]) is not None, "the app after the bad record")
        assert directory.alive
    finally:
        directory.stop()


def test_the_directory_of_a_gateway_with_another_secrets_key_refuses_every_key(namespace: str, home: Path,
                                                                               tmp_path_factory: pytest.TempPathFactory
                                                                               ) -> None:
    made = _json("create", "a")
    elsewhere = tmp_path_factory.mktemp("other-home")
    secret_box(None, elsewhere, create=True)
    directory = _directory(namespace, elsewhere)
    try:
        assert directory.lookup(made["key_id"]) is None and directory.refused == 1
    finally:
        directory.stop()


def _replicas(namespace: str, limit: Callable[[str], Limit | None]) -> tuple[RedisQuotas, RedisQuotas]:
    url = os.environ["REACH_REDIS_URL"]
    return (RedisQuotas(client=door_client(url), namespace=namespace, capability_limit=limit),
            RedisQuotas(client=door_client(url), namespace=namespace, capability_limit=limit))


def test_two_replicas_share_one_app_bucket(namespace: str) -> None:
    slow = CallerApp(app_id="app_shared", name="a", tenant="t", capabilities=(), rate=0.001, burst=5)
    one, two = _replicas(namespace, lambda _c: None)
    decisions = [run((one if i % 2 else two).take(slow, "search.web")) for i in range(8)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False] * 3
    assert {d.scope for d in decisions[5:]} == {"app"} and all(d.retry_after_s > 900 for d in decisions[5:])
    other = CallerApp(app_id="app_other", name="b", tenant="t", capabilities=(), rate=0.001, burst=1)
    assert run(one.take(other, "search.web")).allowed  # its own bucket


def test_the_capability_cap_is_shared_and_a_refusal_spends_nothing(namespace: str) -> None:
    caps = {"search.web": Limit(rate=0.001, burst=3)}
    one, two = _replicas(namespace, caps.get)
    apps = [CallerApp(app_id=f"app_{i}", name="a", tenant="t", capabilities=(), rate=0.001, burst=2)
            for i in range(2)]
    decisions = [run((one, two)[i % 2].take(apps[i % 2], "search.web")) for i in range(4)]
    assert [d.allowed for d in decisions] == [True, True, True, False] and decisions[3].scope == "capability"
    assert run(two.take(apps[1], "search.news")).allowed  # app_1 spent one token on search.web, not two
    assert not run(two.take(apps[1], "search.news")).allowed


def test_a_bucket_refills_on_redis_s_clock(namespace: str) -> None:
    # rate 1/s: a loaded machine may let well over 50 ms pass between the two calls, never a second
    fast = CallerApp(app_id="app_fast", name="a", tenant="t", capabilities=(), rate=1.0, burst=1)
    one, two = _replicas(namespace, lambda _c: None)
    assert run(one.take(fast, "c")).allowed
    refused = run(two.take(fast, "c"))
    assert not refused.allowed and 0 < refused.retry_after_s <= 1.0
    _until(lambda: run(two.take(fast, "c")).allowed, "a token to come back")


def test_a_nonce_is_refused_across_two_stores(namespace: str) -> None:
    url = os.environ["REACH_REDIS_URL"]
    one = RedisNonceStore(client=door_client(url), namespace=namespace)
    two = RedisNonceStore(client=door_client(url), namespace=namespace)
    nonce = "n-" + uuid.uuid4().hex
    assert run(one.claim("app_1", nonce, 60))
    assert not run(two.claim("app_1", nonce, 60)) and not run(one.claim("app_1", nonce, 60))
    assert run(two.claim("app_2", nonce, 60))
    assert 0 < run(door_client(url).ttl(f"{namespace}:gateway:nonce:app_1:{nonce}")) <= 60


def test_a_replayed_signed_request_is_refused_by_another_replica(namespace: str, home: Path) -> None:
    made = _json("create", "a")
    directory = _directory(namespace, home)
    url = os.environ["REACH_REDIS_URL"]
    try:
        replicas = [SignatureAuthenticator(directory=directory,
                                           nonces=RedisNonceStore(client=door_client(url), namespace=namespace))
                    for _ in range(2)]
        now = int(time.time())
        header = _v2(made["secret"], now)
        first = run(replicas[0].authenticate(key_id=made["key_id"], signature=header, **SIGNED, now=now))
        assert isinstance(first, Verified)
        assert run(replicas[1].authenticate(key_id=made["key_id"], signature=header, **SIGNED, now=now)) == REPLAY
    finally:
        directory.stop()


def test_records_written_by_the_cli_decode_as_apps(namespace: str, home: Path) -> None:
    made = _json("create", "a", "--rate", "2.5")
    directory = _directory(namespace, home)
    try:
        [app] = directory.table.apps().values()
        assert app.app_id == made["app_id"] and app.rate == 2.5 and app.burst == 3
        assert codec.decode(codec.encode(app), type(app)) == app
    finally:
        directory.stop()


def test_open_door_wires_the_directory_nonces_quotas_and_authenticator(namespace: str, home: Path) -> None:
    made = _json("create", "a", "--rate", "0.001", "--burst", "2")
    door = open_door(ready_timeout=30, gateway=GatewaySettings(), reach=ReachSettings(), kafka=KafkaSettings(),
                     redis=RedisSettings())
    try:
        now = int(time.time())
        header = _v2(made["secret"], now)
        outcome = run(door.authenticator.authenticate(key_id=made["key_id"], signature=header, **SIGNED, now=now))
        assert isinstance(outcome, Verified)
        assert run(door.authenticator.authenticate(key_id=made["key_id"], signature=header, **SIGNED,
                                                   now=now)) == REPLAY
        takes = [run(door.quotas.take(outcome.entry.app, "search.web")).allowed for _ in range(3)]
        assert takes == [True, True, False]
    finally:
        door.close()
        run(door.aclose())
    assert not door.directory.alive


def test_a_gateway_without_a_secrets_key_refuses_to_open(namespace: str, home: Path) -> None:
    with pytest.raises(ConfigError, match="REACH_GATEWAY_SECRETS_KEY is unset"):
        open_door(ready_timeout=30, gateway=GatewaySettings(), reach=ReachSettings(), kafka=KafkaSettings(),
                  redis=RedisSettings())
    assert not (home / "gateway-secrets.key").exists()


def test_a_script_redis_has_not_seen_is_loaded_and_the_batch_runs_again() -> None:
    """ScriptBatcher's NOSCRIPT path (as after a Redis restart), on a script no one has loaded: a fresh comment."""
    client = door_client(os.environ["REACH_REDIS_URL"])
    script = f"-- {uuid.uuid4().hex}\nreturn ARGV[1]"
    sha = hashlib.sha1(script.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1
    batch = ScriptBatcher.on(client).script(script)

    async def calls() -> list[Any]:
        return list(await asyncio.gather(*(batch([], [f"v{i}"]) for i in range(5))))  # one loop turn: one pipeline
    try:
        assert run(client.script_exists(sha)) == [False]
        assert run(calls()) == [f"v{i}".encode() for i in range(5)]
        assert run(client.script_exists(sha)) == [True]
        assert run(calls()) == [f"v{i}".encode() for i in range(5)]  # loaded now: EVALSHA alone
    finally:
        run(client.aclose())


def test_two_replicas_share_one_read_bucket_apart_from_the_request_bucket(namespace: str) -> None:
    url = os.environ["REACH_REDIS_URL"]
    one, two = (RedisQuotas(client=door_client(url), namespace=namespace, read_limit=Limit(rate=0.001, burst=3))
                for _ in range(2))
    reader = CallerApp(app_id="app_reader", name="r", tenant="t", capabilities=(), rate=0.001, burst=1)
    decisions = [run((one if i % 2 else two).take_read(reader)) for i in range(5)]
    assert [d.allowed for d in decisions] == [True, True, True, False, False]
    assert decisions[3].scope == "read" and decisions[3].retry_after_s > 900
    assert run(one.take(reader, "search.web")).allowed, "reads never spend the app's request token"


def test_a_read_of_many_rows_takes_as_many_tokens_of_the_shared_read_bucket(namespace: str) -> None:
    """Issue 37, finding 10: a trace read pays for the rows it reads, on the bucket every replica shares."""
    url = os.environ["REACH_REDIS_URL"]
    one, two = (RedisQuotas(client=door_client(url), namespace=namespace, read_limit=Limit(rate=0.001, burst=10))
                for _ in range(2))
    reader = CallerApp(app_id="app_rows", name="r", tenant="t", capabilities=(), rate=0.001, burst=1)
    assert run(one.take_read(reader, 4)).allowed and run(two.take_read(reader, 4)).allowed
    refused = run(one.take_read(reader, 4))  # 2 tokens left: a 4-token read takes none of them
    assert not refused.allowed and refused.scope == "read" and refused.retry_after_s > 1000
    assert run(two.take_read(reader, 2)).allowed and not run(one.take_read(reader)).allowed
    assert run(one.take_read(reader, 50)).allowed is False, "a cost over the burst is the whole burst, never free"


def test_a_released_nonce_takes_no_redis_key(namespace: str, client: Redis) -> None:
    store = RedisNonceStore(client=client, namespace=namespace)
    assert run(store.claim("app_r", "n-released-01", 360))
    run(store.release("app_r", "n-released-01"))
    assert run(client.exists(f"{namespace}:gateway:nonce:app_r:n-released-01")) == 0
    assert run(store.claim("app_r", "n-released-01", 360)) and not run(store.claim("app_r", "n-released-01", 360))
