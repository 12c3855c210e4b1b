"""A `reach local up` of a test module's own (private REACH_HOME, free ports), and the CLI run against it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reach.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[2]


def clean_env(home: Path) -> dict[str, str]:
    """This process's environment without any REACH_* (the shared broker's), REACH_HOME set to `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REACH_")}
    env.update(REACH_HOME=str(home), REACH_TOPICS_FILE=str(ROOT / "topics.yaml"))
    return env


def reach(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """`reach ARGS` in a child with exactly `env`."""
    return subprocess.run([sys.executable, "-m", "reach", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@contextmanager
def local_up(home: Path, *flags: str) -> Iterator[tuple[dict[str, str], dict[str, str]]]:
    """`reach local up FLAGS` under `home`: (the clean environment, the exports it printed); `down` at exit."""
    base = clean_env(home)
    try:
        up = reach(base, "local", "up", *flags)
        assert up.returncode == 0, up.stderr
        yield base, dict(line.removeprefix("export ").split("=", 1) for line in up.stdout.splitlines())
    finally:
        down = reach(base, "local", "down")
        assert "kafka" in down.stderr, down.stderr


def with_namespace(env: dict[str, str]) -> dict[str, str]:
    """`env` with a fresh REACH_NAMESPACE whose topics are applied."""
    ns = {**env, "REACH_NAMESPACE": "s" + uuid.uuid4().hex[:10]}
    applied = reach(ns, "topics", "apply")
    assert applied.returncode == 0, applied.stderr
    return ns


def kafka_settings(env: dict[str, str]) -> KafkaSettings:
    """Client settings from the exports of a `reach local up --sasl` or `--tls` (the CA only with --tls)."""
    ca = env.get("REACH_SSL_CA_FILE")
    return KafkaSettings(bootstrap=env["REACH_BOOTSTRAP"], security_protocol=env["REACH_SECURITY_PROTOCOL"],
                         sasl_mechanism=env["REACH_SASL_MECHANISM"], sasl_username=env["REACH_SASL_USERNAME"],
                         sasl_password=env["REACH_SASL_PASSWORD"], ssl_ca_file=Path(ca) if ca else None)


API_VERSIONS = b"\x00\x00\x00\x0b\x00\x12\x00\x00\x00\x00\x00\x01\x00\x01x"  # v0, correlation 1, client "x"


def answer_to_plaintext(port: int) -> bytes:
    """The first byte a listener sends back to a plaintext Kafka ApiVersions request (b"" when it hangs up)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(API_VERSIONS)
        try:
            return raw.recv(1)
        except ConnectionResetError:
            return b""
