"""An agent whose id breaks the naming rule; `reach agent run` must refuse it with exit code 2."""

from reach.agent import Agent

agent = Agent("agent://Bad_Name/x")
