"""The supervised loop, for the loops that import it from here: it lives in reach.kafka.supervised (decision 0053)."""

from __future__ import annotations

from reach.kafka.supervised import SupervisedLoop

__all__ = ["SupervisedLoop"]
