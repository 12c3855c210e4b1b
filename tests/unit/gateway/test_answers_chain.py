"""The gateway's synchronous answer of a request its capability's fallback served: the final ending's status and
result under the request's own id, and the chain naming each ending."""

from __future__ import annotations

from reach.gateway import answers
from reach.records import Receipt, Status


def ending(mid: str, capability: str, status: Status, result: bytes | None = None) -> Receipt:
    return Receipt(message_id=mid, trace_id="t", tenant="acme", capability=capability, status=status, at=1,
                   result=result)


def test_the_answer_is_the_fallbacks_result_under_the_requests_id_with_the_chain() -> None:
    code, answer = answers.from_endings([ending("m1", "demo.nobody", Status.UNROUTABLE),
                                         ending("m1-fb0", "demo.echo", Status.COMPLETED, b'{"order": 7}')])
    assert code == 200 and answer.status == "COMPLETED" and answer.result == {"order": 7}
    assert answer.message_id == "m1" and answer.error is None
    assert [(s.message_id, s.status) for s in answer.chain or []] == [("m1", "UNROUTABLE"), ("m1-fb0", "COMPLETED")]


def test_without_a_fallback_the_answer_is_the_receipts_as_before() -> None:
    code, answer = answers.from_endings([ending("m1", "demo.nobody", Status.UNROUTABLE)])
    assert code == 404 and answer.chain is None and answer.error == "unroutable"
