"""The usage counter: terminal receipts' usage into apps' and tenants' spend counts (reach.streams.usage.counter)."""
