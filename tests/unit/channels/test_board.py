"""The channel health board: snapshots of a ChannelHealth, their encoding, the board read back, the gauges."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from reach.channels import board
from reach.channels.boardread import read_board
from reach.channels.health import ChannelHealth, ChannelRules


def opened() -> ChannelHealth:
    health = ChannelHealth(ChannelRules())
    for at in (1_000, 2_000, 3_000):
        health.send(at, ok=False, latency_ms=10, rate_limited=True)
    return health


def test_three_429s_show_as_open_with_the_reason() -> None:
    snap = board.snapshot(opened(), channel="sms", instance_id="i1", agent_id="agent://channels/sms", now=3_500)
    assert (snap.state, snap.breaker, snap.since) == ("OPEN", "OPEN", 3_000) and snap.reason
    assert board.decode(board.encode(snap)) == snap
    fresh = board.snapshot(ChannelHealth(), channel="sms", instance_id="i2", agent_id="a", now=0)
    assert (fresh.state, fresh.success, fresh.reason) == ("HEALTHY", None, None)


def test_a_graded_signal_is_in_the_snapshot() -> None:
    health = ChannelHealth(ChannelRules())
    for n in range(10):
        health.send(n, ok=n != 0, latency_ms=100)
    snap = board.snapshot(health, channel="webhook", instance_id="i", agent_id="a", now=20)
    assert snap.state == "DEGRADED" and snap.success == 0.9 and snap.p95_ms == 100


class FakeRedis:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def scan_iter(self, match: str, count: int) -> list[str]:
        prefix = match.rstrip("*")
        return [k for k in self.values if k.startswith(prefix)]

    def mget(self, keys: list[str]) -> list[Any]:
        return [self.values.get(k) for k in keys]


def test_the_board_reads_the_namespace_and_skips_what_is_not_a_snapshot() -> None:
    snap = board.snapshot(opened(), channel="sms", instance_id="i1", agent_id="a", now=3_500)
    other = board.snapshot(ChannelHealth(), channel="email", instance_id="i0", agent_id="b", now=1)
    redis = FakeRedis({board.key("ns", "i1"): board.encode(snap), board.key("ns", "i0"): board.encode(other),
                       board.key("ns", "bad"): b"{not json", board.key("other", "i9"): board.encode(snap)})
    found = read_board(redis, "ns")  # type: ignore[arg-type]
    assert sorted(s.instance_id for s in found) == ["i0", "i1"]
    assert [r["channel"] for r in board.rows(found)] == ["email", "sms"]


def test_the_gauges() -> None:
    registry = CollectorRegistry()
    snap = board.snapshot(opened(), channel="sms", instance_id="i1", agent_id="a", now=3_500)
    registry.register(board.HealthCollector(lambda: snap, board.Counts(delivered=5, reply_urls=4, callbacked=3)))
    text = generate_latest(registry).decode()
    assert 'agentreach_channel_state{channel="sms",instance_id="i1"} 2.0' in text
    assert 'agentreach_channel_delivered_total{channel="sms",instance_id="i1"} 5.0' in text
    assert 'agentreach_channel_reply_urls_total{channel="sms",instance_id="i1"} 4.0' in text
    assert 'agentreach_channel_callbacked_total{channel="sms",instance_id="i1"} 3.0' in text
    assert "agentreach_channel_success_ratio{" not in text  # too few sends to grade: no sample, not a zero
