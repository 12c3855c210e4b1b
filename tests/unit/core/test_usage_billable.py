"""What a receipt's usage may charge (reach.core.usage.billable): bounded amounts, whatever a receipt carries."""

from __future__ import annotations

from reach.core.usage import MAX_COST_MICROS, MAX_TOKENS, Billable, billable
from reach.records import Usage


def test_a_receipts_negative_amounts_count_nothing_and_absurd_ones_count_their_bound() -> None:
    """Issue 37, finding 8: the usage counter took a receipt's amounts as they came; negative ones lowered a spend."""
    negative = billable(Usage(input_tokens=-10_000, output_tokens=5, cost_micros=-7_000_000, currency="USD"),
                        currency="USD")
    assert (negative.tokens, negative.cost_micros) == (5, 0) and len(negative.problems) == 2
    huge = billable(Usage(input_tokens=10**15, output_tokens=10**15, cost_micros=10**18), currency="USD")
    assert (huge.tokens, huge.cost_micros) == (2 * MAX_TOKENS, MAX_COST_MICROS)
    assert billable(Usage(input_tokens=3, cost_micros=9, currency="JPY"), currency="USD").cost_micros == 0
    assert billable(Usage(input_tokens=3, output_tokens=4, cost_micros=9), currency="USD") == Billable(7, 9)
