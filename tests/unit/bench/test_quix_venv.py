"""The Quix Streams environment: built once, reused by its marker, and a failed step is a reason, not a crash."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reach.tooling.bench import quix


def test_a_built_environment_is_reused_without_running_anything(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    (tmp_path / ".complete").write_text(quix.QUIX_VERSION)
    assert quix.ensure_venv(tmp_path) == tmp_path / "bin" / "python"


def test_a_failing_build_step_says_which_step_and_why() -> None:
    with pytest.raises(quix.VenvUnavailable, match=r"pip install x failed: .*no-such-module"):
        quix._run([sys.executable, "-m", "no-such-module"], "pip install x", 30)
    with pytest.raises(quix.VenvUnavailable, match="python -m venv"):
        quix._run(["/nonexistent/python"], "python -m venv", 30)


def test_the_forwarder_script_imports_nothing_of_this_project() -> None:
    source = quix.APP.read_text()
    assert "import reach" not in source and "from reach" not in source
