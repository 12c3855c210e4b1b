"""The supervised loop without a broker: restarts with a capped backoff, stops on other errors, stops while
backing off, reports ready and healthy, and always runs the loop's own shutdown."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from reach.kafka.supervised import SupervisedLoop

LOG = logging.getLogger("reach.test.supervised")


class Flaky(SupervisedLoop):
    """Each run takes the next step: raise it, or (None) report ready and run until stopped."""

    thread_name = "reach-test-loop"
    label = "test loop"
    restart_on = (ConnectionError,)
    backoff_first_s = 0.01
    backoff_most_s = 0.03
    log = LOG

    def __init__(self, steps: list[BaseException | None]) -> None:
        super().__init__()
        self.steps = steps
        self.runs = 0
        self.closed = 0  # the loop's `finally`: its final flush and commit
        self.fail_now = threading.Event()  # makes a running loop raise ConnectionError

    def _loop(self) -> None:
        step = self.steps[min(self.runs, len(self.steps) - 1)]
        self.runs += 1
        try:
            if step is not None:
                raise step
            self._mark_ready()
            while not self._stop.wait(0.01):
                if self.fail_now.is_set():
                    self.fail_now.clear()
                    raise ConnectionError("broker went away")
        finally:
            self.closed += 1


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


@pytest.fixture
def loops() -> Iterator[list[Flaky]]:
    made: list[Flaky] = []
    yield made
    for loop in made:
        loop.stop(timeout=5)


def flaky(loops: list[Flaky], steps: list[BaseException | None]) -> Flaky:
    loop = Flaky(steps)
    loops.append(loop)
    return loop


def restarts(caplog: pytest.LogCaptureFixture) -> list[float]:
    """The backoffs the restart log lines announce."""
    return [float(r.args[1]) for r in caplog.records  # type: ignore[index, arg-type]
            if r.name == LOG.name and r.msg == "%s restarting in %.1fs: %s"]


def test_a_retriable_error_restarts_the_loop_with_a_doubling_capped_backoff(
        loops: list[Flaky], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    loop = flaky(loops, [ConnectionError("a"), ConnectionError("b"), ConnectionError("c"), ConnectionError("d"),
                         None])
    loop.start()
    assert loop.wait_ready(10), f"never came up: {loop.error!r}"
    assert loop.runs == 5 and loop.closed == 4, "each failed run closed its clients before the next one opened"
    assert restarts(caplog) == pytest.approx([0.01, 0.02, 0.03, 0.03])
    assert all(r.levelno == logging.WARNING and r.exc_info is None for r in caplog.records), "no traceback"
    assert loop.healthy() and loop.error is None, "a recovered loop is healthy again"


def test_while_it_backs_off_the_error_is_reported_and_it_is_neither_ready_nor_healthy(loops: list[Flaky]) -> None:
    loop = flaky(loops, [None])
    loop.backoff_first_s = 60.0
    loop.start()
    assert loop.wait_ready(10)
    loop.fail_now.set()
    until(lambda: loop.error is not None)
    assert isinstance(loop.error, ConnectionError)
    assert loop.running and not loop.ready and not loop.healthy()


def test_any_other_error_stops_the_loop_and_stays_in_error(loops: list[Flaky],
                                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    bug = ValueError("a bug, not the broker")
    loop = flaky(loops, [ConnectionError("first"), bug, None])
    loop.start()
    loop.join(10)
    assert not loop.running and loop.runs == 2 and loop.closed == 2
    assert loop.error is bug and not loop.healthy() and not loop.ready
    [stopped] = [r for r in caplog.records if r.getMessage() == "test loop stopped"]
    assert stopped.levelno == logging.ERROR and stopped.exc_info is not None and stopped.exc_info[1] is bug


def test_stop_while_backing_off_returns_at_once_without_another_run(loops: list[Flaky]) -> None:
    loop = flaky(loops, [ConnectionError("down"), None])
    loop.backoff_first_s = 60.0
    loop.start()
    until(lambda: loop.error is not None)
    started = time.monotonic()
    loop.stop(timeout=10)
    assert time.monotonic() - started < 5, "the backoff wait ends on stop"
    assert not loop.running and loop.runs == 1 and loop.closed == 1


def test_ready_only_once_the_loop_says_so_and_stop_runs_its_shutdown(loops: list[Flaky]) -> None:
    loop = flaky(loops, [None])
    assert not loop.ready and not loop.healthy(), "not started"
    with loop:
        assert loop.wait_ready(10)
        assert loop.ready and loop.healthy() and loop.runs == 1
        loop.fail_now.set()  # a restart clears ready until the next run is up again
        until(lambda: loop.runs == 2 and loop.ready)
        assert loop.healthy() and loop.error is None
    assert not loop.running and not loop.ready and not loop.healthy()
    assert loop.closed == 2, "the final run closed its clients on stop"


def test_a_loop_that_returns_is_done_not_restarted(loops: list[Flaky]) -> None:
    class Once(Flaky):
        def _loop(self) -> None:
            self.runs += 1

    once = Once([None])
    loops.append(once)
    once.start()
    once.join(10)
    assert once.runs == 1 and not once.running and once.error is None


def test_restart_traceback_logs_each_restart_with_its_traceback(loops: list[Flaky],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOG.name)
    loop = flaky(loops, [ConnectionError("down"), None])
    loop.restart_traceback = True  # a restart set wide enough to hold bugs (the delay tiers restart on Exception)
    loop.start()
    assert loop.wait_ready(10)
    [restart] = [r for r in caplog.records if r.getMessage().startswith("test loop restarting in")]
    assert restart.levelno == logging.ERROR and restart.exc_info is not None


def test_the_loops_old_import_names_the_same_class() -> None:
    from reach.streams import supervised

    assert supervised.SupervisedLoop is SupervisedLoop
