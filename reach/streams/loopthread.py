"""A background loop on its own thread that restarts after infrastructure errors and stops on anything else."""

from __future__ import annotations

import logging
import threading


class LoopThread:
    """Subclasses implement `_loop()` (return when `_stop` is set) and name what restarts it in `restart_on`."""

    thread_name = "reach-loop"
    restart_on: tuple[type[BaseException], ...] = ()
    log = logging.getLogger("reach")

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def healthy(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.error is None

    def _loop(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                self._loop()
                return
            except self.restart_on as exc:  # e.g. NOT_LEADER right after topic creation: a fresh start cures it
                self.error = exc
                self.log.warning("%s restarting in %.1fs: %s", self.thread_name, backoff, exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except BaseException as exc:  # noqa: BLE001 - surfaced through .error / healthy()
                self.error = exc
                self.log.exception("%s stopped", self.thread_name)
                return
