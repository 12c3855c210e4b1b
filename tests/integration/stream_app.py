"""The stream app (`python -m reach router`: faust worker + hot path) as a subprocess for integration tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from reach.tooling.local.process import free_port
from tests.integration.agent_support import wait_for

ROOT = Path(__file__).resolve().parents[2]


class StreamApp:
    """One `reach router` worker on its own web port; restartable, killable."""

    def __init__(self, log_dir: Path, role: str = "all") -> None:
        self.role = role
        self.port = free_port()
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90) -> StreamApp:
        self.starts += 1
        log = open(self.log_dir / f"router-{self.role}-{self.starts}.log", "wb")
        env = {**os.environ, "REACH_WEB_PORT": str(self.port)}
        args = [sys.executable, "-m", "reach", "router", "--interval", "2", "--role", self.role]
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(self._healthy, timeout, "the router's /healthz", interval=0.3)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self.log_tail()}") from None
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"router exited: {self.log_tail()}")
        try:
            return bool(self.get("/healthz").get("ok"))
        except (OSError, ValueError, urllib.error.URLError):
            return False

    def get(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as resp:
                data: dict[str, Any] = json.loads(resp.read())
                return data
        except urllib.error.HTTPError as exc:
            body: dict[str, Any] = json.loads(exc.read() or b"{}")
            body["_status"] = exc.code
            return body

    def text(self, path: str) -> str:
        with urllib.request.urlopen(self.url + path, timeout=10) as resp:
            return str(resp.read().decode())

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        path = self.log_dir / f"router-{self.role}-{self.starts}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""
