"""The audit writer: the registry and control history appended to `<ns>.audit` (reach.streams.audit.writer)."""
