"""The agent SDK: declare capabilities on an Agent, return values or raise signals, `agent.run()`."""

from reach.agent.agent import Agent, Context
from reach.agent.exceptions import AgentError, InvalidDeclaration, LeaseLost
from reach.agent.outcomes import Outcome
from reach.agent.signals import (
    BusinessError,
    Canceled,
    NeedsAuth,
    NeedsInput,
    NoData,
    Reject,
    Retry,
    TransientError,
)

__all__ = [
    "Agent", "AgentError", "BusinessError", "Canceled", "Context", "InvalidDeclaration", "LeaseLost", "NeedsAuth",
    "NeedsInput", "NoData", "Outcome", "Reject", "Retry", "TransientError",
]
