"""The control POLICY as the SDK sees it: re-read from the compacted control topic in the background."""

from __future__ import annotations

import logging
import threading

from reach.control import ControlView, read_control
from reach.names import Names
from reach.records import Policy
from reach.settings import KafkaSettings

log = logging.getLogger("reach.agent")


class PolicyCache:
    """`get(capability)` answers from the last read; a daemon thread refreshes it every `every_s` seconds."""

    def __init__(self, *, names: Names, kafka: KafkaSettings, every_s: float = 15.0) -> None:
        self._names = names
        self._kafka = kafka
        self._every_s = every_s
        self._view = ControlView()
        self._stop = threading.Event()

    def start(self) -> None:
        self._refresh()
        threading.Thread(target=self._loop, name="reach-policy", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def get(self, capability: str) -> Policy:
        return self._view.policy(capability)

    def _loop(self) -> None:
        while not self._stop.wait(self._every_s):
            self._refresh()

    def _refresh(self) -> None:
        try:
            self._view = read_control(names=self._names, kafka=self._kafka, timeout=5)
        except Exception as exc:  # noqa: BLE001 - a stale policy is better than a stopped agent
            log.warning("could not re-read the control policy (%s); keeping the last one", exc)
