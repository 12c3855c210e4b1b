"""The semantic stage's index: embeddings of every catalog text, ranked by cosine similarity to an intent."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reach.intent.catalog import CatalogEntry
from reach.intent.model import Embedder

TOP_K = 5


@dataclass(frozen=True)
class Match:
    """A capability's best cosine similarity to the intent, and the catalog text that gave it."""

    capability: str
    score: float
    text: str


class SemanticIndex:
    """Built from a catalog; a capability scores the best cosine of any of its texts. Rebuilding with an
    embedder's cache (`vectors`) embeds only the texts that are new since the last build."""

    def __init__(self, embedder: Embedder, entries: Mapping[str, CatalogEntry],
                 vectors: dict[str, Any] | None = None) -> None:
        self.embedder = embedder
        self.vectors: dict[str, Any] = vectors if vectors is not None else {}
        self._owners: list[str] = []
        self._texts: list[str] = []
        for entry in entries.values():
            for text in entry.texts:
                self._owners.append(entry.capability)
                self._texts.append(text)
        fresh = [t for t in dict.fromkeys(self._texts) if t not in self.vectors]
        if fresh:
            for text, vector in zip(fresh, embedder.embed(fresh), strict=True):
                self.vectors[text] = vector
        self._matrix: Any = None
        if self._texts:
            import numpy as np

            self._matrix = np.stack([self.vectors[t] for t in self._texts])

    def __len__(self) -> int:
        return len(self._texts)

    def rank(self, intent: str, k: int = TOP_K) -> list[Match]:
        """The k best capabilities, best first (an empty catalog ranks nothing)."""
        if self._matrix is None:
            return []
        scores = self._matrix @ self.embedder.embed([intent])[0]
        best: dict[str, Match] = {}
        for owner, text, score in zip(self._owners, self._texts, scores.tolist(), strict=True):
            if owner not in best or score > best[owner].score:
                best[owner] = Match(owner, float(score), text)
        return sorted(best.values(), key=lambda m: (-m.score, m.capability))[:k]
