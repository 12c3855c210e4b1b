"""The gateway's reply topic: one per process (reach.replyhub.ReplyHub), named stably per host and port."""

from __future__ import annotations

from reach.invoke import host_client_id


def gateway_client_id(port: int) -> str:
    """A reply-topic id stable per host and port: a restarted replica reuses its topic, two replicas never share."""
    return f"{host_client_id('gw')}-{port}"
