"""The health writer: the one process per health partition that folds receipts into `<ns>.health`."""

from reach.streams.health.writer import HealthWriter, health_group

__all__ = ["HealthWriter", "health_group"]
