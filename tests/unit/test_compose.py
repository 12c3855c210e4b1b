"""docker/compose.yaml publishes the plaintext broker and the password-less Redis on loopback only."""

from __future__ import annotations

from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "compose.yaml"


def test_every_published_port_is_bound_to_loopback() -> None:
    """Issue 28, finding 12: `9092:9092` and `6379:6379` published Kafka and Redis on every interface."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = {name: service.get("ports", []) for name, service in services.items()}
    assert published["kafka"] and published["redis"]
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
