"""The embedded default: a single-node KRaft Kafka broker and a Redis on loopback, under REACH_HOME."""

from reach.tooling.local.infra import LocalInfra, LocalStatus

__all__ = ["LocalInfra", "LocalStatus"]
