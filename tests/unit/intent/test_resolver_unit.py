"""The resolver worker's catalog refresh and resolution with an in-memory state and a fake embedder (no broker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from reach.envelopes import now_ms
from reach.intent import mappings
from reach.records import AgentRegistration, AgentState, Capability
from reach.streams.resolver import Resolver


class LetterEmbedder:
    """A test fake: unit vectors of letter counts (enough to tell the fake catalog's texts apart)."""

    name = "letters"

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), 26), dtype=np.float32)
        for row, text in enumerate(texts):
            for ch in text.lower():
                if "a" <= ch <= "z":
                    out[row, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def _registration(*names: str) -> AgentRegistration:
    return AgentRegistration(agent_id="agent://a/b", instance_id="i-1", build_version="1",
                             capabilities=[Capability(name=n, version="1.0.0") for n in names],
                             state=AgentState.READY, heartbeat_at=now_ms(), ttl_ms=60_000,
                             inbox_topic="t.agent.a.b")


def test_refresh_follows_registrations_and_mappings_and_clears_the_cache() -> None:
    worker = Resolver(embedder=LetterEmbedder)
    worker._embedder = LetterEmbedder()  # what start() does before reading the views
    worker.state.apply_registration("i-1", _registration("weather.forecast", "text.translate"))
    worker.refresh(now_ms())
    assert worker.capabilities == {"weather.forecast", "text.translate"}
    assert worker.resolve("Weather Forecast").stage == "exact"  # seeded from the name
    assert worker.resolve("weather forecast").stage == "exact" and worker.cache.hits == 1
    record = mappings.record("rain soon", "text.translate")
    worker.state.control.apply(record.key, record)
    worker.refresh(now_ms())
    res = worker.resolve("rain soon")
    assert res.stage == "exact" and res.capability == "text.translate" and worker.cache.hits == 1  # cleared
    assert len(worker.latencies_ms) == worker.cache.misses == 2  # a hit costs no resolution


def test_without_the_model_everything_but_the_exact_map_is_handed_off() -> None:
    worker = Resolver(embedder=LetterEmbedder)
    worker.unavailable = "IntentModelMissing: not installed"
    worker.state.apply_registration("i-1", _registration("weather.forecast"))
    worker.refresh(now_ms())
    assert worker.resolve("weather forecast").stage == "exact"
    res = worker.resolve("is it raining")
    assert res.stage == "handoff" and "IntentModelMissing" in res.note
