"""When Redis's memory began after a message or within a key's window, Kafka is asked (reach.core.retention)."""

from reach.core.retention import CLOCK_SLACK_MS, began_after, key_may_be_forgotten

DAY = 24 * 3600 * 1000


def test_a_message_created_before_the_memory_began_may_be_forgotten() -> None:
    assert began_after(created_at_ms=99, memory_since_ms=100)
    assert not began_after(created_at_ms=100, memory_since_ms=100)
    assert not began_after(created_at_ms=99, memory_since_ms=None)


def test_a_key_may_be_forgotten_for_one_window_and_the_slack_after_the_memory_began() -> None:
    assert key_may_be_forgotten(now_ms=DAY, window_ms=DAY, memory_since_ms=1)
    assert key_may_be_forgotten(now_ms=DAY + CLOCK_SLACK_MS - 1, window_ms=DAY, memory_since_ms=0)
    assert not key_may_be_forgotten(now_ms=DAY + CLOCK_SLACK_MS, window_ms=DAY, memory_since_ms=0)
    assert not key_may_be_forgotten(now_ms=5, window_ms=DAY, memory_since_ms=None)
