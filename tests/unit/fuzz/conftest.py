"""Hypothesis profiles for the fuzz tests: `ci` (the default, a few hundred examples, repeatable) and `long`
(10,000 per target, fresh random examples), chosen with REACH_FUZZ_PROFILE; `make fuzz` runs `long`."""

import os

from hypothesis import HealthCheck, settings

# No deadline: the box is shared, and a slow example is not a bug (timings are not asserted).
settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("REACH_FUZZ_PROFILE", "ci"))
