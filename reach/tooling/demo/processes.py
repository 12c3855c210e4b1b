"""The demo's child processes (the stream app and the example agents): start, watch, stop, never orphan.

Children run in their own session, so a Ctrl-C in the terminal reaches only the demo, which then stops
them in order (agents drain first, then the router). On Linux they also get SIGTERM if the demo itself
dies without cleaning up (PR_SET_PDEATHSIG), so not even a SIGKILL of the demo leaves them running.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reach.tooling.demo.exceptions import DemoError
from reach.tooling.local.process import tail

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn asking Linux to SIGTERM the child when the demo dies (resolved before any fork)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    prctl = ctypes.CDLL(name, use_errno=True).prctl

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


@dataclass
class Child:
    """One process the demo started, with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def running(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        return tail(self.log, lines)


class Children:
    """Everything the demo started, stopped in reverse order of importance: agents, then the router."""

    def __init__(self, *, cwd: Path, log_dir: Path, env: dict[str, str]) -> None:
        self.cwd = cwd
        self.log_dir = log_dir
        self.env = env
        self.started: list[Child] = []
        self._preexec = _die_with_parent()

    def spawn(self, name: str, args: list[str], **env: str) -> Child:
        """`python -m reach ARGS` from the repository root, output to `<log_dir>/<name>.log`."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "reach", *args], cwd=self.cwd, env={**self.env, **env},
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=self._preexec,  # noqa: PLW1509 - only prctl, resolved before
            )
        child = Child(name, proc, log)
        self.started.append(child)
        return child

    def check(self) -> None:
        """Raise DemoError when a child has exited on its own (with the end of its log)."""
        for child in self.started:
            code = child.proc.poll()
            if code is not None:
                raise DemoError(f"{child.name} (pid {child.pid}) stopped unexpectedly (exit code {code}). "
                                f"Last lines of {child.log}:\n{child.log_tail()}")

    def stop(self, children: list[Child], timeout: float) -> None:
        """SIGTERM them all, wait up to `timeout` for clean exits, then SIGKILL what is left."""
        for child in children:
            if child.running():
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in children:
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(10)

    def stop_all(self, *, hurry: bool = False) -> None:
        """Agents first (they drain and deregister), then the router (it flushes and commits)."""
        agents = [c for c in self.started if c.name != "router"]
        self.stop(agents, 5.0 if hurry else 30.0)
        self.stop([c for c in self.started if c.name == "router"], 5.0 if hurry else 30.0)

    def alive(self) -> list[Child]:
        return [c for c in self.started if c.running()]


def get_json(url: str, timeout: float = 2.0) -> Any:
    """GET a JSON view of the stream app; None when it does not answer (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our own loopback URL
            return json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return None


def wait_until(condition: Callable[[], Any], *, timeout: float, what: str, children: Children,
               stopping: Callable[[], bool]) -> Any:
    """Poll `condition` until truthy; DemoError if a child dies or `timeout` passes; None when stopping."""
    deadline = time.monotonic() + timeout
    while not stopping():
        children.check()
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoError(f"Timed out after {timeout:.0f}s waiting for {what}. Logs: {children.log_dir}")
        time.sleep(0.5)
    return None


def environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus `extra` (what every child inherits)."""
    return {**os.environ, **extra}
