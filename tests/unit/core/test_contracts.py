"""The contract version an intake stamps on a request and the agent's comparison, and the content key of a request
to an idempotent capability (reach.core.contracts), pure."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import pytest

from reach.core.contracts import canonical_json, content_key, contract_version, mismatch
from reach.records import Capability


def cap(version: str, schema: Mapping[str, object] | None = None) -> Capability:
    return Capability(name="doc.search", version=version, input_schema=json.dumps(schema or {}))


def body(document: object) -> Callable[[], bytes]:
    return lambda: json.dumps(document).encode()


def test_one_version_in_range_is_the_contract_without_reading_the_payload() -> None:
    def unread() -> bytes:
        raise AssertionError("the payload is not read when one version is in range")

    assert contract_version([cap("1.2.0"), cap("2.0.0")], "^1", unread) == "1.2.0"
    assert contract_version([cap("1.2.0")], "^2", unread) is None, "none in range: no contract"


def test_several_in_range_the_oldest_of_the_newest_line_that_accepts_the_payload() -> None:
    needs_q = {"type": "object", "required": ["q"]}
    live = [cap("1.2.0"), cap("1.4.1"), cap("1.3.0", needs_q)]
    assert contract_version(live, "^1", body({"x": 1})) == "1.2.0", "1.3.0 refuses it; 1.2.0 and 1.4.1 accept"
    assert contract_version([cap("1.2.0", needs_q), cap("1.4.0")], "^1", body({"x": 1})) == "1.4.0"
    # across majors: the newest major's line, its oldest version
    assert contract_version([cap("1.9.0"), cap("2.1.0"), cap("2.3.0")], "*", body({})) == "2.1.0"
    # 0.x: the minor is the line
    assert contract_version([cap("0.2.1"), cap("0.2.5"), cap("0.3.0")], "*", body({})) == "0.3.0"
    # nobody accepts it: still a contract (the agent REJECTS the payload with the schema's reason)
    assert contract_version([cap("1.0.0", needs_q), cap("1.1.0", needs_q)], "^1", body({})) == "1.0.0"


def test_an_instance_serves_its_line_from_the_contract_on() -> None:
    assert mismatch("1.4.0", None) is None, "no contract named: not compared"
    assert mismatch("1.4.0", "1.2.0") is None and mismatch("1.2.0", "1.2.0") is None
    older = mismatch("1.1.0", "1.2.0")
    assert older and "checked against contract 1.2.0" in older and "serves 1.1.0" in older
    assert mismatch("2.0.0", "1.2.0") is not None, "another major"
    assert mismatch("0.3.0", "0.2.0") is not None, "0.x: another minor is another line"
    bad = mismatch("1.0.0", "latest")
    assert bad and "is not a version" in bad


def test_the_content_key_ignores_json_spelling_and_keeps_every_part() -> None:
    def key(payload: bytes, **changes: str) -> str:
        parts = {"capability": "doc.search", "version": "1.0.0", "tenant": "t1", **changes}
        return content_key(payload=payload, content_type="application/json", **parts)

    same = key(b'{"a": 1, "b": [1, 2]}')
    assert same.startswith("content:") and same == key(b'{"b":[1,2],"a":1}')
    assert len({same, key(b'{"a": 2, "b": [1, 2]}'), key(b'{"a": 1, "b": [1, 2]}', tenant="t2"),
                key(b'{"a": 1, "b": [1, 2]}', version="1.1.0"),
                key(b'{"a": 1, "b": [1, 2]}', capability="doc.rank")}) == 5


def test_two_apps_or_two_sessions_never_share_a_content_key() -> None:
    """Security review, this session: the key was per tenant, so an app could read (or plant) another app's result
    for the idempotency window; it is per sender and per session, as a caller's own key is per app."""
    def key(**changes: str) -> str:
        parts: dict[str, str] = {"capability": "doc.search", "version": "1.0.0", "tenant": "t1",
                                 "source": "gateway:app_a", **changes}
        return content_key(payload=b'{"account": "42"}', content_type="application/json", **parts)

    assert key() == key() != key(source="gateway:app_b")
    assert key(session_key="s1") != key(session_key="s2") and key(session_key="s1") != key()
    assert canonical_json(b"\x00not json", "application/json") == b"\x00not json"
    assert canonical_json(b"{ }", "text/plain") == b"{ }"


@pytest.mark.parametrize("version", ["1.0.0", "10.2.3"])
def test_a_valid_contract_version_is_no_mismatch_for_itself(version: str) -> None:
    assert mismatch(version, version) is None


def test_a_long_schema_version_is_refused_without_being_remembered() -> None:
    why = mismatch("1.0.0", "1." * 10_000)
    assert why and "is not a version" in why
