"""The fault suite's knobs (env REACH_FAULTS_*): traffic rate, phase lengths, how long a fault lasts."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class FaultSettings(BaseSettings):
    """Every phase of a scenario: warm-up, the fault, traffic after it, then a bounded drain.

    Env: REACH_FAULTS_RATE, REACH_FAULTS_WARMUP_S, REACH_FAULTS_AFTER_S, REACH_FAULTS_DOWN_S,
    REACH_FAULTS_PAUSE_S, REACH_FAULTS_SICK_S, REACH_FAULTS_DRAIN_S, REACH_FAULTS_BROKERS."""

    model_config = SettingsConfigDict(env_prefix="REACH_FAULTS_", frozen=True, extra="forbid")

    rate: float = Field(default=200.0, gt=0, le=5000, description="open-loop requests per second")
    warmup_s: float = Field(default=5.0, ge=0, description="traffic before the fault")
    after_s: float = Field(default=10.0, gt=0, description="traffic after the fault ended")
    down_s: float = Field(default=5.0, ge=0, description="how long a killed broker or Redis stays down")
    pause_s: float = Field(default=15.0, gt=0, description="SIGSTOP and partition length: past the agent session "
                           "timeout (6 s), the brokers' session timeout (9 s) and replica.lag.time.max.ms (10 s)")
    sick_s: float = Field(default=10.0, gt=0, description="how long the downstream fails every call")
    drain_s: float = Field(default=120.0, gt=0, description="longest wait, after the traffic, for terminals")
    brokers: int = Field(default=3, ge=1, le=5, description="cluster size `reach faults run` starts")
