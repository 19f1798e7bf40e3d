"""The distilled scorer as a compute node: a text scored by a model `orchestrator distill`
trained, with no LLM call. The scorer's folder format and loader live here, below the
training (analysis/distill.py), which writes what this reads."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .embeddings import warn_english_encoder
from .metrics import METRICS_EXTRA
from .registry import register

# What `orchestrator distill` (analysis/distill.py) writes into a scorer's folder.
SCORER_FILE = "scorer.joblib"
CARD_FILE = "card.json"


def compose(text: str, context: str | None) -> str:
    """The string the embedding model sees: the context (e.g. the platform) then the text."""
    return f"[{context}] {text}" if context else text


@dataclass
class Scorer:
    """A trained classifier plus the embedding model it was trained on."""

    classifier: Any
    classes: list[int]
    embedding_model: str | None  # None: the packaged default model
    card: dict[str, Any]

    def _encode(self, texts: list[str]) -> Any:
        from .embeddings import encoder

        return encoder(self.embedding_model).encode(texts)

    def predict_proba(self, texts: Sequence[str], contexts: Sequence[str | None] | None = None):
        """Class probabilities, one row per text, columns in `classes` order."""
        if not contexts or not self.card.get("context_field"):
            # A scorer trained on bare texts must see bare texts.
            contexts = [None] * len(texts)
        inputs = [compose(t, c) for t, c in zip(texts, contexts, strict=True)]
        return self.classifier.predict_proba(self._encode(inputs))

    def predict(
        self, texts: Sequence[str], contexts: Sequence[str | None] | None = None
    ) -> list[int]:
        """The most likely label of each text."""
        probabilities = self.predict_proba(texts, contexts)
        return [self.classes[int(i)] for i in probabilities.argmax(axis=1)]

    def score_one(self, text: str, context: str | None = None) -> dict[str, Any]:
        """Label, expected score and class probabilities of one text (the compute node's value)."""
        probabilities = self.predict_proba([text], [context])[0]
        pairs = list(zip(self.classes, (float(p) for p in probabilities), strict=True))
        return {
            "label": self.classes[int(probabilities.argmax())],
            "expected": round(sum(c * p for c, p in pairs), 4),
            "probabilities": {str(c): round(p, 4) for c, p in pairs},
        }


_scorers: dict[tuple[str, float], Scorer] = {}
_scorers_lock = threading.Lock()


def load_scorer(model_dir: Path) -> Scorer:
    """Load a saved scorer once per process (reloaded if the file changes)."""
    import joblib

    folder = Path(model_dir).expanduser().resolve()
    path = folder / SCORER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run `orchestrator distill` first")
    key = (str(folder), path.stat().st_mtime)
    with _scorers_lock:
        if key not in _scorers:
            saved = joblib.load(path)
            card = json.loads((folder / CARD_FILE).read_text(encoding="utf-8"))
            _scorers[key] = Scorer(
                saved["classifier"], list(saved["classes"]), card.get("embedding_model"), card
            )
        return _scorers[key]


@register(
    "distilled_score",
    blocking=True,
    requires=("sentence_transformers", "sklearn", "joblib"),
    extra=METRICS_EXTRA,
    reads_files=("model_dir",),  # scorer.joblib is a pickle
)
def distilled_score(
    text: str, model_dir: str, context: str | None = None, language: str | None = None
) -> dict[str, Any]:
    """Score one text with a scorer trained by `orchestrator distill` (no LLM call).

    A scorer on the English default encoder warns once when it meets a non-English row
    (by `language`, else by script)."""
    if not model_dir:
        raise ValueError("model_dir is empty: pass the folder `orchestrator distill` wrote")
    scorer = load_scorer(Path(model_dir))
    if scorer.embedding_model is None:
        warn_english_encoder("distilled_score", language, text)
    return scorer.score_one(text, context)
