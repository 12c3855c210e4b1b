"""Child processes of a bench run (faust forwarder, stream app, agent): started, watched for CPU, stopped by pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


class Commanded:
    """A `python -m <args>` child driven by one JSON command a line on stdin, answering one JSON line on stdout;
    its stderr goes to a log file. Closing stdin asks it to finish."""

    def __init__(self, name: str, args: list[str], env: dict[str, str]) -> None:
        self.name = name
        prefix = f"reach-bench-{name.replace(' ', '-')}-"
        self._log = tempfile.NamedTemporaryFile(prefix=prefix, suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, text=True, env={**os.environ, **env})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, **command: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        if not line:
            raise RuntimeError(f"the {self.name} exited:\n{self.tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def tail(self, lines: int = 30) -> str:
        return "\n".join(Path(self._log.name).read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout: float = 20.0) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
