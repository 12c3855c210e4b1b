"""Fuzzing the payload checks (router validation, the agent pipeline's payload step) with random and deep JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reach.agent import Agent
from reach.agent.agent import CapabilitySpec
from reach.agent.outcomes import Outcome
from reach.agent.pipeline import _payload
from reach.core.routing import validation_error
from reach.envelopes import new_envelope

SCHEMAS = [
    {},
    {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer"}}},
    {"type": "array", "items": {"$ref": "#"}},  # recursive: validation walks the whole document
    {"anyOf": [{"type": "string", "pattern": "^(a+)+$"}, {"type": "object", "additionalProperties": {"$ref": "#"}}]},
]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=16),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)
payloads = st.one_of(
    st.binary(max_size=256),
    json_values.map(lambda v: json.dumps(v).encode()),
    json_values.map(lambda v: json.dumps(v).encode()[:-1]),  # cut short
    st.text(max_size=64).map(lambda s: s.encode("utf-8", errors="surrogatepass")),
)
CONTENT_TYPES = ["application/json", "application/json; charset=utf-8", "application/vnd.acme+json", "text/plain"]


def _deep(depth: int, shape: str, closed: bool) -> bytes:
    opening, closing = {"array": ("[", "]"), "object": ('{"a":', "}")}[shape]
    return (opening * depth + ("1" + closing * depth if closed else "")).encode()


deep_payloads = st.builds(_deep, st.sampled_from([1_000, 10_000, 100_000]), st.sampled_from(["array", "object"]),
                          st.booleans())


def _spec(schema: dict[str, Any]) -> CapabilitySpec:
    agent = Agent("agent://fuzz/payloads")
    agent.capability("fuzz.payloads", version="1.0.0", input_schema=schema)(lambda payload: payload)
    return agent.capabilities["fuzz.payloads"]


SPECS = [_spec(s) for s in SCHEMAS]


@given(schema=st.sampled_from([*map(json.dumps, SCHEMAS), "", "{", "true"]), payload=payloads,
       content_type=st.sampled_from(CONTENT_TYPES))
def test_router_validation_answers_any_payload(schema: str, payload: bytes, content_type: str) -> None:
    problem = validation_error(schema, payload, content_type)
    assert problem is None or isinstance(problem, str)


# Registrations come from any writer on the registry topic, not only the SDK (which checks schemas).
MALFORMED_SCHEMAS = ["[]", "null", "1", '"x"', '{"type": 5}', '{"$ref": "#/nope"}']


@settings(max_examples=len(MALFORMED_SCHEMAS) * 4, report_multiple_bugs=False)
@given(schema=st.sampled_from(MALFORMED_SCHEMAS), payload=json_values.map(lambda v: json.dumps(v).encode()))
def test_router_validation_ignores_a_malformed_agent_schema(schema: str, payload: bytes) -> None:
    assert validation_error(schema, payload, "application/json") is None, "the agent's broken schema is its problem"


@given(spec=st.sampled_from(SPECS), payload=payloads, content_type=st.sampled_from(CONTENT_TYPES))
def test_the_agent_payload_step_answers_any_payload(spec: CapabilitySpec, payload: bytes, content_type: str) -> None:
    envelope = new_envelope("fuzz.payloads", {}).model_copy(update={"payload": payload, "content_type": content_type})
    value, verdict = _payload(envelope, spec)
    assert verdict is None or verdict.outcome is Outcome.REJECT


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # the failing repr is 200 KB
@settings(max_examples=12, report_multiple_bugs=False)  # 12 distinct (depth, shape, closed) cases
@given(schema=st.sampled_from([json.dumps(s) for s in SCHEMAS]), payload=deep_payloads)
def test_router_validation_answers_deeply_nested_json(schema: str, payload: bytes) -> None:
    problem = validation_error(schema, payload, "application/json")
    assert problem is None or isinstance(problem, str)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")  # the failing repr is 200 KB
@settings(max_examples=12, report_multiple_bugs=False)
@given(spec=st.sampled_from(SPECS), payload=deep_payloads)
def test_the_agent_payload_step_rejects_deeply_nested_json(spec: CapabilitySpec, payload: bytes) -> None:
    envelope = new_envelope("fuzz.payloads", {}).model_copy(update={"payload": payload})
    _, verdict = _payload(envelope, spec)
    assert verdict is None or verdict.outcome is Outcome.REJECT
