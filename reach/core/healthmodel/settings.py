"""HealthSettings: every duration and threshold of the health rules and breakers (a plain model: the core reads
no environment; the shell loads it from REACH_HEALTH_* as reach.settings.HealthEnvSettings).

| variable                          | default | meaning                                                       |
|-----------------------------------|---------|---------------------------------------------------------------|
| REACH_HEALTH_ERROR_RATE           | 0.2     | breaker opens above this failure share ...                    |
| REACH_HEALTH_MIN_CALLS            | 10      | ... over at least this many calls ...                         |
| REACH_HEALTH_ERROR_WINDOW_MS      | 10000   | ... within this window                                        |
| REACH_HEALTH_OVERLOADS            | 3       | OVERLOAD / rate-limit failures within the window that open it |
| REACH_HEALTH_OPEN_MS              | 30000   | how long OPEN lasts before HALF_OPEN                          |
| REACH_HEALTH_PROBE_ADMIT          | 0.1     | share of the instance's traffic admitted while HALF_OPEN      |
| REACH_HEALTH_PROBES               | 3       | probe successes that close the breaker (one failure reopens)  |
| REACH_HEALTH_SLOW_RATIO           | 0.4     | a slow window has more than this share of slow calls          |
| REACH_HEALTH_SLOW_WINDOWS         | 5       | consecutive slow windows that set weight 0                    |
| REACH_HEALTH_SLOW_WINDOW_MS       | 10000   | length of one slow window                                     |
| REACH_HEALTH_SLOW_MIN_CALLS       | 3       | calls a window needs to count as slow                         |
| REACH_HEALTH_SLOW_MS              | 120000  | how long weight 0 lasts for a slow instance                   |
| REACH_HEALTH_SLOW_TIMEOUT_FACTOR  | 2.0     | execution timeout multiplier while slow (sole candidate)      |
| REACH_HEALTH_SLOW_P50_FACTOR      | 3.0     | slow threshold without POLICY slow_threshold_ms: x cap p50    |
| REACH_HEALTH_EJECT_SUCCESS        | 0.6     | ejected (weight 0) below this 1-minute success rate ...       |
| REACH_HEALTH_EJECT_MIN_CALLS      | 10      | ... over at least this many calls                             |
| REACH_HEALTH_EJECT_WINDOW_MS      | 60000   | the ejection window (the "1 min" success rate)                |
| REACH_HEALTH_EJECT_HOLD_MS        | 30000   | weight 0 this long before the gradual restore begins          |
| REACH_HEALTH_RESTORE_STEPS        | [0.1,0.5,1.0] | admitted share per restore step (JSON list)             |
| REACH_HEALTH_RESTORE_STEP_MS      | 60000   | time per restore step while healthy                           |
| REACH_HEALTH_LONG_WINDOW_MS       | 300000  | the "5 min" success window                                    |
| REACH_HEALTH_BUCKET_MS            | 1000    | granularity of the rolling windows                            |
| REACH_HEALTH_LATENCY_SAMPLES      | 2048    | latest run times kept per instance for p50 / p95              |
| REACH_HEALTH_EMIT_INTERVAL_MS     | 1000    | at most one record per instance this often (changes: at once) |
| REACH_HEALTH_TICK_MS              | 250     | timer for time-driven transitions                             |
| REACH_HEALTH_REPLAY_MS            | 300000  | receipts re-read on taking ownership (rebuilds the windows)   |
| REACH_HEALTH_FORGET_MS            | 600000  | idle this long and healthy or deregistered: tombstoned        |
"""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reach.core.breaker import BreakerRules


class HealthSettings(BaseModel):
    """Thresholds and durations of the health rules; tests pass short ones."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_rate: Annotated[float, Field(ge=0, le=1)] = 0.2
    min_calls: Annotated[int, Field(ge=1)] = 10
    error_window_ms: Annotated[int, Field(gt=0)] = 10_000
    overloads: Annotated[int, Field(ge=1)] = 3
    open_ms: Annotated[int, Field(gt=0)] = 30_000
    probe_admit: Annotated[float, Field(gt=0, le=1)] = 0.1
    probes: Annotated[int, Field(ge=1)] = 3
    slow_ratio: Annotated[float, Field(ge=0, le=1)] = 0.4
    slow_windows: Annotated[int, Field(ge=1)] = 5
    slow_window_ms: Annotated[int, Field(gt=0)] = 10_000
    slow_min_calls: Annotated[int, Field(ge=1)] = 3
    slow_ms: Annotated[int, Field(gt=0)] = 120_000
    slow_timeout_factor: Annotated[float, Field(ge=1)] = 2.0
    slow_p50_factor: Annotated[float, Field(gt=1)] = 3.0
    eject_success: Annotated[float, Field(ge=0, le=1)] = 0.6
    eject_min_calls: Annotated[int, Field(ge=1)] = 10
    eject_window_ms: Annotated[int, Field(gt=0)] = 60_000
    eject_hold_ms: Annotated[int, Field(ge=0)] = 30_000
    restore_steps: tuple[float, ...] = (0.1, 0.5, 1.0)
    restore_step_ms: Annotated[int, Field(gt=0)] = 60_000
    long_window_ms: Annotated[int, Field(gt=0)] = 300_000
    bucket_ms: Annotated[int, Field(gt=0)] = 1_000
    latency_samples: Annotated[int, Field(ge=16)] = 2_048
    emit_interval_ms: Annotated[int, Field(ge=0)] = 1_000
    tick_ms: Annotated[int, Field(gt=0)] = 250
    replay_ms: Annotated[int, Field(ge=0)] = 300_000
    forget_ms: Annotated[int, Field(gt=0)] = 600_000

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        steps = self.restore_steps
        if not steps or any(not 0 < s <= 1 for s in steps) or list(steps) != sorted(steps) or steps[-1] != 1.0:
            raise ValueError(f"REACH_HEALTH_RESTORE_STEPS must rise within (0, 1] and end at 1.0; got {list(steps)}")
        longest = max(self.error_window_ms, self.eject_window_ms, self.slow_window_ms * self.slow_windows)
        if self.long_window_ms < longest:
            raise ValueError(f"REACH_HEALTH_LONG_WINDOW_MS ({self.long_window_ms}) must cover the longest rule "
                             f"window ({longest} ms): the rolling buckets are kept that long")
        return self

    @property
    def breaker(self) -> BreakerRules:
        """The breaker's share of these settings."""
        return BreakerRules(error_rate=self.error_rate, min_calls=self.min_calls, window_ms=self.error_window_ms,
                            overloads=self.overloads, open_ms=self.open_ms, probe_admit=self.probe_admit,
                            probes=self.probes)
