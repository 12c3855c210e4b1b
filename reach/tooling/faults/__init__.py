"""Fault injection for tests and `reach faults`: dependencies that can be stopped, started and wiped on demand."""
