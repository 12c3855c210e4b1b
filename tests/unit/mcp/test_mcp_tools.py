"""Capabilities as MCP tools and outcomes as tool results (reach.mcp.tools, pure)."""

from __future__ import annotations

import json

import mcp_types as types

from reach.mcp import tools
from reach.mcp.ports import PENDING, Ended, Refused
from reach.records import Capability

GREET = json.dumps({"type": "object", "description": "Greets someone", "properties": {"name": {"type": "string"}},
                    "required": ["name"]})


def cap(name: str = "demo.greet", version: str = "1.0.0", schema: str = GREET, output: str = "{}",
        tags: list[str] | None = None) -> Capability:
    return Capability(name=name, version=version, input_schema=schema, output_schema=output, tags=tags or [])


def text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


def test_one_tool_per_name_with_the_newest_versions_contract() -> None:
    newer = json.dumps({"type": "object", "properties": {"who": {"type": "string"}}})
    listed = tools.tools([cap(version="1.2.0", schema=newer), cap(version="1.10.0", schema=GREET),
                          cap("demo.echo", schema="{}", tags=["demo"])])
    assert [t.name for t in listed] == ["demo.echo", "demo.greet"]
    greet = listed[1]
    assert greet.input_schema == json.loads(GREET)
    assert greet.description == "Greets someone (Agent-Reach capability demo.greet; live versions: 1.10.0, 1.2.0)"
    assert listed[0].input_schema == {"type": "object"}  # no contract: any arguments
    assert listed[0].description is not None and "tags: demo" in listed[0].description


def test_channels_are_never_tools() -> None:
    assert tools.tools([cap("channel.webhook"), cap()]) == tools.tools([cap()])
    assert tools.fingerprint([cap("channel.webhook")]) == ()


def test_a_contract_that_is_not_an_object_is_wrapped_and_unwrapped() -> None:
    strings = cap("text.upper", schema='{"type": "string"}')
    (tool,) = tools.tools([strings])
    assert tool.input_schema == {"type": "object", "properties": {"payload": {"type": "string"}},
                                 "required": ["payload"]}
    assert tools.payload_of(strings, {"payload": "hi"}) == "hi"
    assert tools.payload_of(cap(), {"name": "ada"}) == {"name": "ada"}
    assert tools.payload_of(cap(), None) == {}


def test_a_broken_contract_reads_as_none() -> None:
    (tool,) = tools.tools([cap(schema="{not json", output="[1]")])
    assert tool.input_schema == {"type": "object"} and tool.output_schema is None


def test_an_output_schema_only_where_it_describes_an_object() -> None:
    output = '{"type": "object", "properties": {"greeting": {"type": "string"}}}'
    assert tools.tool(cap(output=output)).output_schema == json.loads(output)
    assert tools.tool(cap(output='{"type": "string"}')).output_schema is None


def test_the_fingerprint_follows_versions_and_contracts() -> None:
    assert tools.fingerprint([cap(), cap()]) == tools.fingerprint([cap()])
    assert tools.fingerprint([cap()]) != tools.fingerprint([cap(version="1.1.0")])
    assert tools.fingerprint([cap()]) != tools.fingerprint([cap(schema="{}")])


def test_a_completed_call_is_structured_content() -> None:
    result = tools.result_of(Ended("m1", "t1", "COMPLETED", {"greeting": "hi"}))
    assert result.is_error is False and result.structured_content == {"greeting": "hi"}
    assert json.loads(text(result)) == {"greeting": "hi"}
    assert result.meta == {"agent-reach/message_id": "m1", "agent-reach/status": "COMPLETED"}
    scalar = tools.result_of(Ended("m1", "t1", "COMPLETED", 42))
    assert scalar.structured_content == {"result": 42}


def test_failed_and_rejected_are_tool_errors_with_the_receipts_reason() -> None:
    failed = tools.result_of(Ended("m1", "t1", "FAILED", reason="m1 ended FAILED: BUSINESS/OUT: none left",
                                   hint="see receipt_error"))
    assert failed.is_error is True and failed.structured_content is None
    assert text(failed) == "failed: m1 ended FAILED: BUSINESS/OUT: none left (see receipt_error)"
    rejected = tools.result_of(Ended("m2", "t2", "REJECTED"))
    assert rejected.is_error is True and text(rejected) == "rejected: m2 ended REJECTED"
    waited = tools.result_of(Ended("m3", "t3", PENDING))
    assert waited.is_error is True and text(waited).startswith("timeout:") and "/v1/messages/m3" in text(waited)


def test_a_refusal_is_a_tool_error_naming_what_failed() -> None:
    refusal = Refused(422, "invalid_payload", "demo.greet 1.0.0: payload violates the input schema at name: 42 "
                      "is not of type 'string'", "fix the payload")
    result = tools.refused(refusal)
    assert result.is_error is True
    assert text(result) == ("invalid_payload: demo.greet 1.0.0: payload violates the input schema at name: 42 is "
                            "not of type 'string' (fix the payload)")
    quota = tools.refused(Refused(429, "quota_exceeded", "the request quota of app a1 is used up",
                                  headers={"Retry-After": "3"}))
    assert text(quota) == "quota_exceeded: the request quota of app a1 is used up; retry after 3 s"
