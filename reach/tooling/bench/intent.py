"""Mode `intent`: the resolver's stages alone, per request: the exact map and the semantic stage (the real model).

The catalog and requests are the sample set (reach.intent.sample): each semantic call embeds one intent and
ranks it against every catalog text, as the resolver does on a cache miss. No broker.
"""

from __future__ import annotations

import time

from reach.intent.catalog import CatalogEntry
from reach.intent.model import shared_model
from reach.intent.sample import CATALOG, UNRELATED
from reach.intent.semantic import SemanticIndex
from reach.intent.stages import Mapping_, Thresholds, resolve
from reach.intent.text import normalize, phrase_of_name
from reach.tooling.bench.results import ModeResult, latency, own_cpu


def run(*, calls: int = 500) -> list[ModeResult]:
    entries = {c.name: CatalogEntry(c.name, [c.description, *c.examples, phrase_of_name(c.name), " ".join(c.tags)],
                                    c.side_effect_free) for c in CATALOG}
    index = SemanticIndex(shared_model(), entries)
    live = frozenset(entries)
    sef = frozenset(c.name for c in CATALOG if c.side_effect_free)
    exact = {normalize(e): Mapping_(c.name) for c in CATALOG for e in c.examples}
    requests = [p for c in CATALOG for p in c.paraphrases] + list(UNRELATED)
    phrases = list(exact)
    th = Thresholds()
    results = []
    for stage, texts, rank in (("exact", phrases, None), ("semantic", requests, index.rank)):
        for text in texts[:10]:  # warm-up
            resolve(text, exact=exact, live=live, side_effect_free=sef, rank=rank, thresholds=th)
        samples: list[float] = []
        cpu0, wall0 = own_cpu(), time.perf_counter()
        for i in range(calls):
            t = time.perf_counter_ns()
            resolve(texts[i % len(texts)], exact=exact, live=live, side_effect_free=sef, rank=rank, thresholds=th)
            samples.append((time.perf_counter_ns() - t) / 1e6)
        wall, cpu = time.perf_counter() - wall0, own_cpu() - cpu0
        results.append(ModeResult(
            mode=f"intent {stage}", messages=calls, throughput=calls / wall,
            latency=latency(samples, f"one {stage} resolution ({len(index)} catalog texts)"),
            cpu_per_1k=cpu / calls * 1000, lost=0, duplicated=0,
            notes=f"resolver stage alone, {shared_model().name} in numpy; no broker",
        ))
    return results
