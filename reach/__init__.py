"""Agent-Reach: the reach layer for multi-agent systems on Apache Kafka."""

__version__ = "0.1.0"
