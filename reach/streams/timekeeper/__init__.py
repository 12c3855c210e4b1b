"""The timekeeper worker: sweeps the status table for deadlines that passed and writes the timeouts,
retries and expiries they cause (`sweep`); which tasks are due is pure, in `reach.core.deadlines`."""
