"""Child processes of a bench run (faust forwarder, stream app, agent): started, watched for CPU, stopped by pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from reach.tooling.bench.results import process_cpu


class Child:
    """One `python -m ...` child with its own working directory (faust writes its data dir there) and log.

    `python` is another interpreter (a virtual environment of its own) and `module=False` runs a script."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], *, python: str = sys.executable,
                 module: bool = True) -> None:
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix=f"reach-bench-{name.replace(' ', '-')}-"))
        self.log_path = self.dir / "child.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([python, *(["-m"] if module else []), *args], cwd=self.dir,
                                         env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu(self) -> float:
        return process_cpu(self.proc.pid)

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Bounded polling on `condition`; a child that exits or a timeout raises with its log tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}) before {what}:\n{self.tail()}")
            try:
                if condition():
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name}: no {what} within {timeout:.0f}s:\n{self.tail()}")

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (SIGKILL after `timeout`), then remove the working directory and its log."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
