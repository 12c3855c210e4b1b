"""HealthSettings: env names, consistency checks, and one list of settings behind the module table and the docs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

import reach.core.healthmodel.settings as module
from reach.core.healthmodel.settings import HealthSettings
from reach.settings import HealthEnvSettings

DOCS = Path(__file__).resolve().parents[4] / "docs" / "operations.md"


def test_env_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_HEALTH_OPEN_MS", "1234")
    monkeypatch.setenv("REACH_HEALTH_RESTORE_STEPS", "[0.25, 1.0]")
    settings = HealthEnvSettings()  # the shell's loader (an entry point builds it); the core's model reads no env
    assert settings.open_ms == 1234 and settings.restore_steps == (0.25, 1.0)
    assert settings.breaker.open_ms == 1234 and settings.breaker.error_rate == 0.2
    assert isinstance(settings, HealthSettings)


def test_the_core_model_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REACH_HEALTH_OPEN_MS", "1234")
    assert HealthSettings().open_ms == 30_000
    with pytest.raises(ValidationError):
        HealthEnvSettings(restore_steps=(0.5, 0.1, 1.0))  # the loader keeps the model's consistency checks


@pytest.mark.parametrize("bad", [{"restore_steps": (0.5, 0.1, 1.0)}, {"restore_steps": (0.1, 0.5)},
                                 {"long_window_ms": 1_000}, {"error_rate": 1.5}])
def test_inconsistent_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HealthSettings(**bad)  # type: ignore[arg-type]


def test_every_setting_is_in_the_module_table_and_the_operations_doc() -> None:
    for name in HealthSettings.model_fields:
        env = f"REACH_HEALTH_{name.upper()}"
        assert f"| {env} " in (module.__doc__ or ""), env
        assert f"`{env}`" in DOCS.read_text(), env
