"""Non-LLM metric nodes: BLEU, ROUGE, METEOR, embedding similarity and the distilled scorer.

All of them come with the `metrics` install extra. Heavy libraries are imported inside the
functions so that importing orchestrator stays cheap; models and readers are loaded once per
process and cached, because a graph calls these nodes once per example.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..paths import cache_root
from .embeddings import encoder, model_label
from .registry import register

METRICS_EXTRA = "metrics"
WORDNET_UNAVAILABLE = "unavailable: WordNet data not installed"

# -- BLEU ----------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _bleu_metric(smoothing: str, tokenize: str, lowercase: bool) -> Any:
    from sacrebleu.metrics import BLEU

    return BLEU(
        smooth_method=smoothing, tokenize=tokenize, lowercase=lowercase, effective_order=True
    )


@register("bleu", requires=("sacrebleu",), extra=METRICS_EXTRA)
def bleu(
    reference: str,
    candidate: str,
    smoothing: str = "exp",
    tokenize: str = "13a",
    lowercase: bool = False,
) -> dict[str, Any]:
    """Sentence BLEU (sacrebleu, 0-100) of `candidate` against `reference`.

    Sentence-level BLEU needs smoothing (most short texts share no 4-gram); the smoothing
    method and sacrebleu's full signature are returned so a report can name them.
    """
    metric = _bleu_metric(smoothing, tokenize, lowercase)
    result = metric.sentence_score(candidate, [reference])
    return {
        "score": float(result.score),
        "smoothing": smoothing,
        "signature": str(metric.get_signature()),
    }


# -- ROUGE ---------------------------------------------------------------------------------

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@lru_cache(maxsize=8)
def _rouge_scorer(types: tuple[str, ...], stemmer: bool) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(types), use_stemmer=stemmer)


@register("rouge", requires=("rouge_score",), extra=METRICS_EXTRA)
def rouge(reference: str, candidate: str, stemmer: bool = True) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measures (0-1) of `candidate` against `reference`."""
    scores = _rouge_scorer(ROUGE_TYPES, stemmer).score(reference, candidate)
    return {name: float(scores[name].fmeasure) for name in ROUGE_TYPES}


# -- METEOR --------------------------------------------------------------------------------

# Folders that commonly hold the WordNet 3.0 database files (data.noun, index.noun, ...):
# Debian/Ubuntu's `wordnet-base` package and WordNet's own default install location.
SYSTEM_WORDNET_DIRS = (Path("/usr/share/wordnet"), Path("/usr/local/WordNet-3.0/dict"))
_WORDNET_FILES = ("data.noun", "index.noun", "data.verb", "index.verb")

# WordNet 3.0's lexicographer file numbers (documented in lexnames(5WN)). NLTK's reader
# needs this table as a file named `lexnames`; Debian's package leaves it out.
_LEXNAMES = (
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
)
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}

_wordnet_lock = threading.RLock()
_wordnet_readers: dict[str, Any] = {}


def _has_wordnet_files(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _WORDNET_FILES)


def _nltk_wordnet_dir() -> Path | None:
    """WordNet installed the NLTK way (nltk_data/corpora/wordnet), unzipped."""
    import nltk

    try:
        found = Path(str(nltk.data.find("corpora/wordnet")))
    except LookupError:
        return None
    return found if found.is_dir() and _has_wordnet_files(found) else None


def wordnet_dir(explicit: str | Path | None = None) -> Path | None:
    """The WordNet database folder to use, or None when none is installed.

    Order: the `explicit` folder, $ORCHESTRATOR_WORDNET, $WNSEARCHDIR, NLTK's data path,
    then the system locations. An explicit folder that lacks the files gives None rather
    than falling back, so a typo is not silently replaced by another WordNet.
    """
    if explicit:
        folder = Path(explicit).expanduser()
        return folder if _has_wordnet_files(folder) else None
    for variable in ("ORCHESTRATOR_WORDNET", "WNSEARCHDIR"):
        value = os.environ.get(variable)
        if value and _has_wordnet_files(Path(value)):
            return Path(value)
    found = _nltk_wordnet_dir()
    if found is not None:
        return found
    return next((d for d in SYSTEM_WORDNET_DIRS if _has_wordnet_files(d)), None)


def _readable_copy(folder: Path) -> Path:
    """A folder NLTK's reader accepts: the original when complete, else a cached copy.

    NLTK needs `lexnames` inside the same folder (it refuses symlinks that leave it), so
    a database without one is copied once to the user cache with the table written in.
    """
    if (folder / "lexnames").is_file():
        return folder
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    target = cache_root() / f"wordnet-{digest}"
    if not (target / "lexnames").is_file():
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(folder, staging)
        lines = [
            f"{number:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}"
            for number, name in enumerate(_LEXNAMES)
        ]
        (staging / "lexnames").write_text("\n".join(lines) + "\n", encoding="utf-8")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


@lru_cache(maxsize=1)
def _english_wordnet_class() -> type:
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class EnglishWordNet(WordNetCorpusReader):
        """A reader over any WordNet 3.0 folder, English only.

        NLTK's reader maps every non-default database onto its own downloaded `wordnet`
        corpus for multilingual lookups, which fails when that corpus is absent.
        """

        def map_wn(self, version: str = "wordnet") -> None:
            return None

    return EnglishWordNet


def wordnet_reader(explicit: str | Path | None = None) -> Any | None:
    """An NLTK WordNet reader over the local database (cached), or None when absent."""
    folder = wordnet_dir(explicit)
    if folder is None:
        return None
    key = str(folder.resolve())
    with _wordnet_lock:
        if key not in _wordnet_readers:
            import nltk

            readable = _readable_copy(folder).resolve()
            # NLTK only opens corpus files under its data path roots.
            if str(readable) not in nltk.data.path:
                nltk.data.path.append(str(readable))
            with warnings.catch_warnings():
                # "multilingual functions are not available": fine, METEOR is English.
                warnings.simplefilter("ignore", UserWarning)
                _wordnet_readers[key] = _english_wordnet_class()(str(readable), None)
        return _wordnet_readers[key]


_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def _tokens(text: str) -> list[str]:
    # A regex tokenizer: NLTK's word_tokenize would need the punkt data files too.
    return _TOKEN.findall(text)


@register(
    "meteor",
    blocking=True,
    requires=("nltk",),
    extra=METRICS_EXTRA,
    reads_files=("wordnet_dir",),
)
def meteor(reference: str, candidate: str, wordnet_dir: str | None = None) -> dict[str, Any]:
    """METEOR (NLTK, 0-1) when a local WordNet exists; otherwise says it is unavailable.

    Without WordNet METEOR loses its synonym stage, so the node refuses to report a number
    rather than a silently different metric (or a 0 that would count as a vote).
    """
    reader = wordnet_reader(wordnet_dir)
    if reader is None:
        return {"available": False, "reason": WORDNET_UNAVAILABLE}
    from nltk.translate.meteor_score import meteor_score

    # NLTK's reader seeks and reads shared file handles: one thread at a time.
    with _wordnet_lock:
        score = meteor_score([_tokens(reference)], _tokens(candidate), wordnet=reader)
    return {"available": True, "score": float(score)}


# -- Embedding similarity ------------------------------------------------------------------


@register(
    "embedding_similarity",
    blocking=True,
    requires=("sentence_transformers",),
    extra=METRICS_EXTRA,
    # A model folder's modules.json names Python classes to import.
    reads_files=("model_path",),
)
def embedding_similarity(
    reference: str, candidate: str, model_path: str | None = None
) -> dict[str, Any]:
    """Cosine similarity (-1..1) of sentence embeddings from a local model folder.

    The default model (all-MiniLM-L6-v2) is a semantic embedding: it rewards shared
    meaning, not shared style. Pass a style-embedding checkpoint's folder to measure style.
    """
    enc = encoder(model_path)
    vectors = enc.encode([reference, candidate])
    return {"score": float(vectors[0] @ vectors[1]), "model": model_label(enc.path)}
