"""Producer profiles (decision 0052): what each profile sets, that overrides win, and which producer has which."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from reach.kafka import clients, memory
from reach.settings import PRODUCER_PROFILES, KafkaSettings

REACH = Path(__file__).resolve().parents[2] / "reach"
PASSED_ON = "(its caller's)"  # a wrapper that hands its own `profile` argument on

# Every producer in reach/ and its profile, as decision 0052 assigns them.
CALL_SITES = {
    "a2a/cancelsink.py": ["hot"],
    "a2a/pushbook.py": ["hot"],
    "a2a/pushsender.py": ["hot"],
    "agent/shared.py": ["receipts", "receipts"],
    "aioclient.py": ["hot"],
    "channels/agent.py": ["hot"],
    "client.py": ["hot"],
    "gateway/publisher.py": ["hot"],
    "kafka/acked.py": ["hot"],
    "kafka/auditlog.py": ["feed"],
    "kafka/clients.py": [PASSED_ON],
    "kafka/worker.py": [PASSED_ON],
    "ops/dlq.py": ["hot"],
    "ops/turns.py": ["hot"],
    "streams/audit/writer.py": ["feed"],
    "streams/delays/forwarder.py": ["hot"],
    "streams/dlqwarden.py": ["feed"],
    "streams/health/writer.py": ["feed"],
    "streams/resolver/resolve_loop.py": ["hot"],
    "streams/router/route_loop.py": ["hot"],
    "streams/status/fold.py": ["hot"],
    "streams/timekeeper/sweep.py": ["hot"],
    "streams/usage/counter.py": ["hot"],
    "tooling/bench/gateway.py": ["hot"],
    "tooling/bench/peer_client.py": ["hot"],
    "tooling/bench/peer_worker.py": ["hot"],
    "tooling/bench/publish.py": ["hot"],
    "tooling/bench/raw.py": ["hot"],
    "tooling/bench/workspace.py": [PASSED_ON, "hot", "feed"],
    "tooling/demo/traffic.py": ["hot"],
    "tooling/faults/traffic.py": ["hot"],
}


def _profiles_named(tree: ast.AST) -> list[str]:
    """The profile of every `.producer(...)` call, and of every worker's `Subscription(...)` (its producer)."""
    named = []
    for node in ast.walk(tree):
        name = node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else (
            node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None)
        if isinstance(node, ast.Call) and name == "Subscription":
            chosen = next((k.value for k in node.keywords if k.arg == "producer_profile"), ast.Constant("hot"))
            named.append(str(chosen.value) if isinstance(chosen, ast.Constant) else PASSED_ON)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "producer":
            profile = next((k.value for k in node.keywords if k.arg == "profile"), None)
            if profile is None:
                named.append("(none)")
            else:
                named.append(str(profile.value) if isinstance(profile, ast.Constant) else PASSED_ON)
    return named


def test_every_producer_names_the_profile_the_decision_gives_it() -> None:
    found = {}
    for path in sorted(REACH.rglob("*.py")):
        named = _profiles_named(ast.parse(path.read_text()))
        if named:
            found[path.relative_to(REACH).as_posix()] = sorted(named)
    assert found == {site: sorted(profiles) for site, profiles in CALL_SITES.items()}


@pytest.mark.parametrize("profile", sorted(PRODUCER_PROFILES))
def test_every_profile_keeps_the_delivery_settings(profile: str) -> None:
    conf = KafkaSettings(bootstrap="b:9092").producer(profile=profile)  # type: ignore[arg-type]
    assert (conf["enable.idempotence"], conf["acks"], conf["partitioner"], conf["compression.type"]) == (
        True, "all", "murmur2_random", "lz4")


def test_hot_sends_at_once_and_feed_waits_20_ms_for_company() -> None:
    kafka = KafkaSettings(bootstrap="b:9092")
    assert kafka.producer(profile="hot")["linger.ms"] == 2
    assert kafka.producer(profile="receipts")["linger.ms"] == 5  # the agent's: one request per partition batch
    assert kafka.producer(profile="feed")["linger.ms"] == 20
    assert kafka.producer() == kafka.producer(profile="hot")


def test_overrides_win_over_the_profile() -> None:
    conf = KafkaSettings(bootstrap="b:9092").producer(profile="feed", **{"linger.ms": 5, "compression.type": "none"})
    assert (conf["linger.ms"], conf["compression.type"], conf["acks"]) == (5, "none", "all")
    producer = clients.producer(KafkaSettings(bootstrap=f"{memory.SCHEME}profiles"), profile="hot",
                                **{"linger.ms": 7})
    assert isinstance(producer, memory.MemoryProducer)


def test_an_unknown_profile_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown producer profile 'warm': expected one of hot, receipts, feed"):
        KafkaSettings(bootstrap="b:9092").producer(profile="warm")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown producer profile"):
        clients.producer(KafkaSettings(bootstrap="b:9092"), profile="warm")  # type: ignore[arg-type]
