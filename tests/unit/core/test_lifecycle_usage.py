"""The status row carries the usage of the terminal receipt that ended its generation, and only that one."""

from __future__ import annotations

from reach.core.lifecycle import StatusRow, fold
from reach.records import Receipt, Status, Usage

USED = Usage(input_tokens=100, output_tokens=50, model="m", cost_micros=10, currency="USD", source="gateway:a")


def receipt(status: Status, at: int, *, usage: Usage | None = None, gen: int = 0) -> Receipt:
    return Receipt(message_id="m1", generation=gen, trace_id="t", tenant="acme", capability="demo.llm",
                   status=status, at=at, usage=usage)


def run(*receipts: Receipt) -> StatusRow:
    row: StatusRow | None = None
    for r in receipts:
        row = fold(row, r)
    assert row is not None
    return row


def test_the_first_terminal_brings_its_usage_and_a_later_one_changes_nothing() -> None:
    row = run(receipt(Status.STARTED, 1), receipt(Status.COMPLETED, 2, usage=USED),
              receipt(Status.COMPLETED, 3, usage=USED.model_copy(update={"input_tokens": 9})))
    assert row.usage == USED
    assert StatusRow.model_validate_json(row.model_dump_json()).usage == USED  # through the changelog's JSON


def test_a_replay_opens_the_next_generation_without_the_old_usage() -> None:
    row = run(receipt(Status.COMPLETED, 2, usage=USED), receipt(Status.ACCEPTED, 5, gen=1))
    assert row.generation == 1 and row.usage is None
