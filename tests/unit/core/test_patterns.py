"""Contract regexes never backtrack (issue 37, finding 5; reach/core/patterns.py): `^(a+)+$` against forty `a`s and
a `b` (minutes on Python's `re`) is answered wherever a contract is checked, and a pattern the linear-time engine
cannot run is refused where a contract is declared. Each check runs in a forked child (a thread would not do: `re`
holds the GIL while it backtracks, so no join timeout could fire); the test asserts the child finished within a
generous while and what it answered, never how fast."""

from __future__ import annotations

import http.server
import json
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

import mcp_types as types
import pytest
import referencing.exceptions

from reach.agent import InvalidDeclaration
from reach.agent.contract import compile_schema, violation
from reach.core import patterns
from reach.core.routing import validation_error
from reach.core.turns import BadQuestion, answer_problem, question_of
from reach.gateway.checks import Refusal, check_contract
from reach.mcp.bridge import plan
from reach.records import Capability

HOSTILE = "a" * 40 + "b"
EVIL = "^(a+)+$"
SCHEMAS = {  # every keyword jsonschema matches a regex in
    "pattern": ({"type": "object", "properties": {"name": {"type": "string", "pattern": EVIL}}}, {"name": HOSTILE}),
    "patternProperties+additionalProperties": (
        {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}, "additionalProperties": False},
        {HOSTILE: 1}),
    "unevaluatedProperties": (
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
         "patternProperties": {EVIL: {"type": "integer"}}, "unevaluatedProperties": False}, {HOSTILE: 1}),
    "propertyNames": ({"type": "object", "propertyNames": {"pattern": EVIL}}, {HOSTILE: 1}),
    "draft-07": ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                  "patternProperties": {EVIL: {}}, "additionalProperties": False}, {HOSTILE: 1}),
}


def finished(check: Callable[[], Any]) -> Any:
    """What `check` answered (in a forked child); fails when it is still running after a generous while."""
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)
    child = context.Process(target=lambda: writer.send(check()), daemon=True)
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        child.join()
        pytest.fail("the check is still running after 60 s: the regex backtracks")
    assert reader.poll(), f"the check ended without an answer (exit code {child.exitcode})"
    return reader.recv()


@pytest.mark.parametrize("which", sorted(SCHEMAS))
def test_a_backtracking_pattern_is_answered_where_the_gateway_and_the_router_check_a_payload(which: str) -> None:
    schema, payload = SCHEMAS[which]
    text, body = json.dumps(schema), json.dumps(payload).encode()
    problem = finished(lambda: validation_error(text, body, "application/json"))  # the router's check
    assert problem is not None and "violates the input schema" in problem

    def door() -> int:  # the gateway's check (/v1, A2A, MCP all pass through check_contract): its HTTP status
        try:
            check_contract([Capability(name="demo.x", version="1.0.0", input_schema=text)], capability="demo.x",
                           version_range="^1", payload=body, waits=False)
        except Refusal as refusal:
            return refusal.status
        return 200

    assert finished(door) == 422
    assert validation_error(text, json.dumps(conforming(which)).encode(), "application/json") is None


def conforming(which: str) -> dict[str, Any]:
    return {"name": "aaaa"} if which == "pattern" else {"aaaa": 1}


@pytest.mark.parametrize("which", sorted(SCHEMAS))
def test_a_backtracking_pattern_is_answered_where_the_agent_and_an_answer_are_checked(which: str) -> None:
    schema, payload = SCHEMAS[which]
    _, validator = compile_schema(schema, "demo.x input_schema")  # RE2 compiles ^(a+)+$: it is declared
    assert finished(lambda: violation(validator, payload)) is not None  # the agent SDK's payload / result check
    question = question_of("Which name?", schema)
    assert finished(lambda: answer_problem(question.schema_text, payload)) is not None  # an answer to NeedsInput


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=a)b", "(?<!x)y", "(x{1000}){1000}"])
def test_a_pattern_the_linear_engine_cannot_run_is_refused_where_a_contract_is_declared(pattern: str) -> None:
    for schema in ({"type": "string", "pattern": pattern}, {"patternProperties": {pattern: {}}}):
        with pytest.raises(InvalidDeclaration, match="linear-time regex engine"):
            compile_schema(schema, "demo.x input_schema")
        with pytest.raises(BadQuestion, match="linear-time regex engine"):
            question_of("Which?", schema)
        served, skipped = plan("calc", [types.Tool(name="add", input_schema=schema)])
        assert served == [] and "linear-time regex engine" in skipped[0]  # `reach mcp bridge` import
    assert patterns.problem(pattern) is not None and patterns.problem(EVIL) is None


def test_a_pattern_refused_at_declaration_but_registered_anyway_validates_nothing_and_freezes_nothing() -> None:
    """A registration produced straight to Kafka skips the SDK: the door's check treats its schema as broken."""
    text = json.dumps({"type": "string", "pattern": r"(a)\1"})
    assert finished(lambda: validation_error(text, b'"aa"', "application/json")) is None


DRAFT7 = "http://json-schema.org/draft-07/schema#"
NESTED = {  # a subschema in another dialect: jsonschema's evolve() picked that dialect's stock class, on `re`
    "nested $schema": {"properties": {"q": {"$schema": DRAFT7, "type": "string", "pattern": EVIL}}},
    "$ref to a $defs entry with its own $schema": {
        "$defs": {"evil": {"$schema": DRAFT7, "type": "string", "pattern": EVIL}}, "properties": {"q": {"$ref":
                                                                                                       "#/$defs/evil"}}},
}


@pytest.mark.parametrize("which", sorted(NESTED))
def test_a_subschema_in_another_dialect_matches_its_patterns_on_the_linear_engine(which: str) -> None:
    """Second review, finding 1: a nested `$schema` sent the contract's regexes back to Python's `re`."""
    text = json.dumps(NESTED[which])
    problem = finished(lambda: validation_error(text, json.dumps({"q": HOSTILE}).encode(), "application/json"))
    assert problem is not None and "violates the input schema" in problem
    _, checker = compile_schema(NESTED[which], "demo.x input_schema")
    assert violation(checker, {"q": HOSTILE}) is not None and violation(checker, {"q": "aaaa"}) is None
    lookahead = json.loads(text.replace(json.dumps(EVIL), json.dumps("^(?=a)a$")))
    assert validation_error(json.dumps(lookahead), b'{"q": "a"}', "application/json") is None  # RE2: broken schema


class Counting(http.server.BaseHTTPRequestHandler):
    gets = 0

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        type(self).gets += 1
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass


def test_a_ref_outside_the_schema_is_refused_at_declaration_and_never_fetched() -> None:
    """Second review, finding 2: a `$ref` to a URL was fetched (no timeout) on every validation: SSRF and a hang."""
    server = http.server.HTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        for schema in ({"type": "object", "properties": {"q": {"$ref": url}}}, {"$ref": url}):
            with pytest.raises(InvalidDeclaration, match="points outside the schema"):
                compile_schema(schema, "demo.x input_schema")
            for tool in (types.Tool(name="add", input_schema=schema),
                         types.Tool(name="add", input_schema={"type": "object"}, output_schema=schema)):
                served, skipped = plan("calc", [tool])  # `reach mcp bridge` import (the SDK checks outputs on `re`)
                assert served == [] and "points outside the schema" in skipped[0]
            assert validation_error(json.dumps(schema), b'{"q": 1}', "application/json") is None  # broken: unfetched
            with pytest.raises(referencing.exceptions.Unresolvable, match="Unresolvable"):
                violation(patterns.validator(schema), {"q": 1})  # registered straight to Kafka: an error, no GET
        assert Counting.gets == 0
        local = {"$defs": {"s": {"type": "string"}}, "properties": {"q": {"$ref": "#/$defs/s"}},
                 "$schema": DRAFT7, "not": {"$ref": DRAFT7}}
        compile_schema(local, "demo.x input_schema")  # inside the schema, or a draft's meta-schema: declared
    finally:
        server.shutdown()
        server.server_close()
