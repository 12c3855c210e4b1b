"""The supervised loop every Kafka worker runs on: one thread, started and stopped from any thread.

A worker implements `_loop()`, which opens its clients, calls `_mark_ready()` once it is connected, runs
until `_stop` is set, and closes its clients (with its final flush and commit) in a `finally`. An exception
in `restart_on` (infrastructure: a fresh loop resumes from the committed offsets) restarts `_loop()` after a
backoff that doubles from `backoff_first_s` up to `backoff_most_s`; anything else stops the worker, and the
exception stays in `error` (so `healthy()` says so). reach.kafka.worker.Worker runs its batch loop on it
(decision 0053); reach.streams.supervised re-exports it. Every worker is a thread that a faust Service starts in
its `on_start` and stops in its `on_stop` (reach.streams.app), or that a CLI process runs; none runs on the
event loop, so the helper is a thread and nothing else.
"""

from __future__ import annotations

import logging
import threading
from typing import Self


class SupervisedLoop:
    """Subclasses implement `_loop()` and declare `restart_on`; `label` names the worker in its log lines."""

    thread_name = "reach-loop"
    label = ""  # the log lines' subject; the thread's name when empty
    restart_on: tuple[type[BaseException], ...] = ()
    restart_traceback = False  # log restarts with the traceback (for a restart set wide enough to hold bugs)
    backoff_first_s = 0.2
    backoff_most_s = 5.0
    stop_timeout_s = 10.0
    log = logging.getLogger("reach")

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        """What stopped the loop for good, or the retriable error it is restarting from (None once it is up)."""

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to finish (it flushes and commits in its own `finally`, also while it backs off) and wait
        for it, at most `timeout` seconds (`stop_timeout_s` by default)."""
        self._stop.set()
        self.join(self.stop_timeout_s if timeout is None else timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def ready(self) -> bool:
        """True while the current loop is up: it called `_mark_ready()` and has not failed since."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def healthy(self) -> bool:
        return self.running and self.error is None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the supervision -----------------------------------------------------------------------------

    def _loop(self) -> None:
        raise NotImplementedError

    def _mark_ready(self) -> None:
        """Called by `_loop()` once its clients are up: a restart has recovered."""
        self.error = None
        self._ready.set()

    def _run(self) -> None:
        name = self.label or self.thread_name
        backoff = self.backoff_first_s
        try:
            while not self._stop.is_set():
                try:
                    self._loop()
                    return
                except self.restart_on as exc:  # e.g. NOT_LEADER right after topic creation: a fresh start cures it
                    self._ready.clear()
                    self.error = exc
                    if self.restart_traceback:
                        self.log.exception("%s restarting in %.1fs: %s", name, backoff, exc)
                    else:
                        self.log.warning("%s restarting in %.1fs: %s", name, backoff, exc)
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, self.backoff_most_s)
                except BaseException as exc:  # noqa: BLE001 - surfaced through .error / healthy()
                    self.error = exc
                    self.log.exception("%s stopped", name)
                    return
        finally:
            self._ready.clear()
