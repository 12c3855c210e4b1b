"""The rig's process handle: an exit the suite did not cause is a crash (the supervisor restarts it and reports
it); a kill or stop by the suite is not."""

from __future__ import annotations

import time
from pathlib import Path

from reach.tooling.faults.rig import Worker, crash_line


def _exited(worker: Worker) -> None:
    assert worker.proc is not None
    worker.proc.wait(60)


def test_an_exit_on_its_own_is_a_crash_with_its_code(tmp_path: Path) -> None:
    worker = Worker(["no-such-command"], {}, tmp_path / "w.log").start()
    _exited(worker)
    assert worker.crashed() == 2, "typer's usage error"
    assert "no-such-command" in (tmp_path / "w.log").read_text(), "its output is kept in its log"


def test_a_kill_by_the_suite_is_no_crash(tmp_path: Path) -> None:
    worker = Worker(["faults", "list"], {}, tmp_path / "w.log").start()
    assert worker.crashed() is None, "still running"
    worker.kill()
    assert worker.crashed() is None
    done = Worker(["faults", "list"], {}, tmp_path / "x.log").start()
    deadline = time.monotonic() + 60
    while done.proc is not None and done.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert done.crashed() == 0, "an exit 0 the suite did not ask for is still reported"


def test_a_crash_is_reported_by_its_assertion_not_by_the_last_stack_line(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    log.write_text("2026 INFO routed 500\npython: rdkafka_queue.h:1086: rd_kafka_enq_once_del_source_return: "
                   "Assertion `eonce->refcnt > 0' failed.\nFatal Python error: Aborted\n\nThread 0x1 (most recent "
                   "call first):\n  File \"x.py\", line 3 in poll\n")
    assert crash_line(log).startswith("python: rdkafka_queue.h:1086")
    log.write_text("Fatal Python error: Segmentation fault\n\nCurrent thread 0x2:\n  File \"y.py\", line 9 in get\n")
    assert crash_line(log) == "Fatal Python error: Segmentation fault"
    log.write_text("INFO one\nINFO last words\n")
    assert crash_line(log) == "INFO last words"
