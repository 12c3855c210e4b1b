"""`LocalInfra.down`: SIGTERM first, SIGKILL once the grace is over (a throwaway home gives its brokers less)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from reach.tooling.local import LocalInfra, process


def test_a_broker_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    stubborn = subprocess.Popen(["bash", "-c", "trap '' TERM; echo trapped; while :; do sleep 0.1; done"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == "trapped\n"
        (tmp_path / "local.json").write_text(json.dumps({"kafka_pid": stubborn.pid}))
        began = time.monotonic()
        stopped = LocalInfra(tmp_path).down(grace_s=0.5)
        assert stubborn.wait(10) == -9 and stopped == ["kafka"]
        assert time.monotonic() - began < 5, "the grace, not the default 60 s"
        assert not process.alive(stubborn.pid)
    finally:
        stubborn.kill()
