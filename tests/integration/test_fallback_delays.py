"""Fallback for an ending a delay tier decides, on the real broker and Redis (issue 25 item 3, decision 0046): a retry
of `demo.flaky` that its delay tier must dead-letter (its target header names no capability topic) ends the request
DEAD_LETTERED, and the status fold sends it on to `demo.echo` from the envelope the router forwarded: one child in the
same trace, COMPLETED with the same payload."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from reach.cli import app as reach_app
from reach.client import Client
from reach.kafka import clients, codec
from reach.kafka import headers as H
from reach.names import Names
from reach.settings import KafkaSettings
from tests.integration.agent_support import spawn, wait_for
from tests.integration.stream_app import StreamApp
from tests.integration.test_fallback import ready, row, served

pytestmark = pytest.mark.integration


def test_a_retry_its_delay_tier_dead_letters_is_served_by_the_fallback(namespace: str, stream_app: StreamApp) -> None:
    names = Names(namespace)
    flaky, echo = spawn("examples.flaky_agent:agent"), spawn("examples.echo_agent:agent")
    try:
        wait_for(lambda: ready(stream_app, "agent://demo/flaky", "agent://demo/echo"), 90, "flaky and echo READY",
                 interval=0.3)
        # the real retry waits on its tier long enough for the broken copy below to end the request first
        set_policy = CliRunner().invoke(reach_app, ["policy", "set", "--capability", "demo.flaky", "--fallback",
                                                    "demo.echo", "--max-attempts", "3", "--backoff-base", "20s"])
        assert set_policy.exit_code == 0, set_policy.output
        with Client() as client:
            envelope = client.envelope("demo.flaky", {"fail_times": 99}, budget_ms=120_000)
            client.publish(envelope)
        mid = envelope.message_id
        wait_for(lambda: (row(stream_app, mid) or {}).get("status") == "RETRY_SCHEDULED", 60, "the retry scheduled",
                 interval=0.3)

        # a copy of the retry whose target header is not a capability topic: the tier can only dead-letter it
        producer = clients.producer(KafkaSettings())
        producer.produce(names.retry("1s"), codec.encode(envelope.model_copy(update={"attempt": 2})),
                         key=mid.encode(), headers=[(H.DUE_AT, b"0"), (H.TARGET, names.control.encode())])
        assert producer.flush(30) == 0

        parent = wait_for(lambda: served(stream_app, mid), 90, "the fallback's child ended", interval=0.3)
        assert parent["status"] == "DEAD_LETTERED" and parent["last_error"]["code"] == "BAD_TARGET"
        assert parent["fallback"] == {"capability": "demo.echo", "message_id": f"{mid}-fb0", "note": None,
                                      "status": "COMPLETED"}
        child = row(stream_app, f"{mid}-fb0")
        assert child is not None and child["trace_id"] == parent["trace_id"]
        assert json.loads(child["result"]) == {"fail_times": 99}, "the same payload"
        trace = CliRunner().invoke(reach_app, ["trace", parent["trace_id"], "--json"])
        assert {m["message_id"] for m in json.loads(trace.stdout)["messages"]} == {mid, f"{mid}-fb0"}
    finally:
        for proc in (flaky, echo):
            proc.terminate()
            proc.wait(60)
