"""invoke_stream / stream_receipt on in-memory seams: chunks in order and once, then the ending."""

from __future__ import annotations

from typing import Any

import pytest

from reach.core.lifecycle import StatusRow, fold
from reach.invoke import InvokeFailed, InvokeTimeout, StreamChunk, StreamProgress, stream_receipt
from reach.records import Chunk, ErrorInfo, Progress, Receipt, Status


def receipt(status: Status, at: int, **kw: Any) -> Receipt:
    return Receipt(message_id="m1", trace_id="t", tenant="default", capability="demo.write", status=status, at=at,
                   **kw)


class Script:
    """A status table and a reply topic that advance one receipt per poll."""

    def __init__(self, receipts: list[Receipt]) -> None:
        self.todo = list(receipts)
        self.row: StatusRow | None = None
        self.reply: Receipt | None = None

    def poll(self, _mid: str, *, generation: int = 0, timeout_s: float = 0.1) -> Receipt | None:
        if self.todo:
            r = self.todo.pop(0)
            self.row = fold(self.row, r)
            if r.status.is_terminal:
                self.reply = r
        return self.reply

    def row_of(self, _mid: str) -> dict[str, Any] | None:
        return None if self.row is None else self.row.model_dump(mode="json")

    def child_of(self, _mid: str, _generation: int = 0) -> tuple[str, int] | None:
        return None  # no fallback named


class FakeClient:
    """Makes the envelope `m1` and publishes nothing (the Script plays the bus)."""

    def envelope(self, capability: str, payload: Any, **fields: Any) -> Any:
        from reach.envelopes import new_envelope

        return new_envelope(capability, payload, reply_to=fields["reply_to"],
                            budget_ms=fields["budget_ms"]).model_copy(update={"message_id": "m1"})

    def publish(self, _envelope: Any) -> None:
        return None


def chunk(at: int, seq: int, data: str, fraction: float | None = None) -> Receipt:
    return receipt(Status.PROGRESS, at, progress=Progress(fraction=fraction,
                                                          chunks=[Chunk(seq=seq, kind="text", data=data)]))


def test_chunks_come_in_order_once_then_the_receipt() -> None:
    script = Script([receipt(Status.STARTED, 1), chunk(2, 0, "a", 0.5), chunk(3, 1, "b", 0.5), chunk(4, 2, "c", 1.0),
                     receipt(Status.COMPLETED, 5, result=b'"abc"')])
    items = list(stream_receipt(script, script.row_of, "m1", poll_s=0))  # type: ignore[arg-type]
    assert [i.data for i in items if isinstance(i, StreamChunk)] == ["a", "b", "c"]
    assert [i.fraction for i in items if isinstance(i, StreamProgress)] == [0.5, 1.0]
    assert isinstance(items[-1], Receipt) and items[-1].status is Status.COMPLETED


def test_the_last_chunks_folded_with_the_ending_are_not_missed() -> None:
    script = Script([])
    script.row = fold(fold(None, receipt(Status.STARTED, 1)), chunk(2, 0, "late"))
    script.row = fold(script.row, receipt(Status.COMPLETED, 3))
    script.reply = receipt(Status.COMPLETED, 3)
    items = list(stream_receipt(script, script.row_of, "m1", poll_s=0))  # type: ignore[arg-type]
    assert [i.data for i in items if isinstance(i, StreamChunk)] == ["late"]


def test_no_ending_in_time_raises_invoke_timeout() -> None:
    script = Script([receipt(Status.STARTED, 1)])
    ticks = iter(range(100))
    with pytest.raises(InvokeTimeout):
        list(stream_receipt(script, script.row_of, "m1", timeout_ms=3000, poll_s=0,  # type: ignore[arg-type]
                            clock=lambda: float(next(ticks))))


def test_a_failed_ending_raises_after_the_chunks() -> None:
    from reach.invoke import invoke_stream

    script = Script([receipt(Status.STARTED, 1), chunk(2, 0, "part"),
                     receipt(Status.FAILED, 3, error=ErrorInfo(kind="BUSINESS", code="NOPE", message="no"))])
    script.topic = "ns.replies.x"  # type: ignore[attr-defined]

    seen: list[Any] = []
    with pytest.raises(InvokeFailed, match="NOPE"):
        for item in invoke_stream(FakeClient(), script, script.row_of, "demo.write", {},  # type: ignore[arg-type]
                                  poll_s=0):
            seen.append(item)
    assert [i.data for i in seen if isinstance(i, StreamChunk)] == ["part"]



class Chain:
    """A request that ended UNROUTABLE and went on to its fallback child `m1-fb0`, which streams and completes."""

    def __init__(self) -> None:
        self.scripts = {"m1": Script([receipt(Status.UNROUTABLE, 1)]),
                        "m1-fb0": Script([child(Status.STARTED, 2), child_chunk(3, 0, "fall"),
                                          child_chunk(4, 1, "back"), child(Status.COMPLETED, 5, result=b'"fallback"')])}

    def poll(self, mid: str, *, generation: int = 0, timeout_s: float = 0.1) -> Receipt | None:
        return self.scripts[mid].poll(mid, generation=generation, timeout_s=timeout_s)

    def row_of(self, mid: str) -> dict[str, Any] | None:
        return self.scripts[mid].row_of(mid)

    def child_of(self, mid: str, generation: int = 0) -> tuple[str, int] | None:
        return ("m1-fb0", 0) if mid == "m1" else None


def child(status: Status, at: int, **kw: Any) -> Receipt:
    return receipt(status, at, **kw).model_copy(update={"message_id": "m1-fb0", "capability": "demo.echo"})


def child_chunk(at: int, seq: int, data: str) -> Receipt:
    return child(Status.PROGRESS, at, progress=Progress(chunks=[Chunk(seq=seq, kind="text", data=data)]))


def test_a_stream_follows_its_fallback_chain_to_the_childs_chunks_and_result() -> None:
    """Client.stream as the other waiting calls: the request's UNROUTABLE went on to its fallback, so the stream says
    so (StreamFallback), streams the child's chunks and ends with the chain's result, `first` the request's own."""
    from reach.invoke import StreamFallback, StreamResult, invoke_stream

    chain = Chain()

    chain.topic = "ns.replies.x"  # type: ignore[attr-defined]
    items = list(invoke_stream(FakeClient(), chain, chain.row_of, "demo.nobody", {}, poll_s=0))  # type: ignore[arg-type]
    fallback = next(i for i in items if isinstance(i, StreamFallback))
    assert (fallback.first.status, fallback.child) == (Status.UNROUTABLE, "m1-fb0")
    assert [i.data for i in items if isinstance(i, StreamChunk)] == ["fall", "back"]
    result = items[-1]
    assert isinstance(result, StreamResult) and result.value == "fallback"
    assert result.receipt.message_id == "m1-fb0" and result.first is not None
    assert result.first.status is Status.UNROUTABLE
