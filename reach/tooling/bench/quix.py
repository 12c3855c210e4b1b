"""Mode `quix`: a Quix Streams forwarder A -> B, the baseline a Python user might pick instead of faust.

quixstreams pins older confluent-kafka and pydantic than this project, so it runs in a virtual
environment of its own, built on first use (`python -m venv` + `pip install quixstreams==QUIX_VERSION`)
under the cache directory and reused afterwards; `reach/tooling/bench/quix_app.py` runs there as a child
process. When the environment cannot be built the mode says why instead of measuring.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from reach.tooling.bench import forwarder
from reach.tooling.bench.results import ModeResult
from reach.tooling.bench.subprocesses import Child
from reach.tooling.bench.workspace import Workspace

QUIX_VERSION = "3.28.1"  # what pip resolves for `quixstreams` here (it brings confluent-kafka 2.12.2)
APP = Path(__file__).with_name("quix_app.py")


class VenvUnavailable(RuntimeError):
    """The Quix Streams environment could not be built (no network, no venv module, a failed install)."""


def venv_dir() -> Path:
    """Where the environment lives: the user's cache directory, beside the broker's jars."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agent-reach" / f"quix-venv-{QUIX_VERSION}"


def ensure_venv(where: Path | None = None, *, timeout: float = 900.0) -> Path:
    """The environment's python, built once (under a lock, so two bench runs do not build it twice)."""
    root = where or venv_dir()
    python, marker = root / "bin" / "python", root / ".complete"
    if marker.exists() and python.exists():
        return python
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(root.parent / f"{root.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists() and python.exists():
            return python
        shutil.rmtree(root, ignore_errors=True)  # a half-built one from an interrupted run
        _run([sys.executable, "-m", "venv", str(root)], "python -m venv", timeout)
        _run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", f"quixstreams=={QUIX_VERSION}"],
             f"pip install quixstreams=={QUIX_VERSION}", timeout)
        _run([str(python), "-c", "import quixstreams"], "import quixstreams", 120)
        marker.write_text(QUIX_VERSION)
    return python


def _run(cmd: list[str], what: str, timeout: float) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VenvUnavailable(f"{what}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise VenvUnavailable(f"{what} failed: {tail[0]}")


def run(ws: Workspace, *, messages: int, warmup: int, timeout: float = 180.0) -> ModeResult:
    try:
        python = ensure_venv()
    except VenvUnavailable as exc:
        return ModeResult.skip("quix", f"no Quix Streams environment ({exc})")

    def start(source: str, sink: str) -> Child:
        return Child("quix", [str(APP), ws.kafka.servers(), f"{ws.namespace}.quix", source, sink],
                     env={"REACH_BENCH_KAFKA_SECURITY": json.dumps(ws.kafka.security())},
                     python=str(python), module=False)

    return forwarder.run(ws, "quix", start, messages=messages, warmup=warmup, timeout=timeout,
                         notes=f"Quix Streams {QUIX_VERSION} in a child process, its own venv (its CPU only)")
