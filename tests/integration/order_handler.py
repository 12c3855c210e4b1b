"""An agent that would serve `demo.order.created` in handle mode while others subscribe to it: refused at start."""

from reach.agent import Agent

agent = Agent("agent://demo/orders")


@agent.capability("demo.order.created", version="1.0.0")
async def handle(payload: dict[str, object]) -> dict[str, object]:
    return payload
