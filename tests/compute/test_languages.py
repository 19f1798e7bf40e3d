"""Metrics on text in any language: tokens in every script, BLEU's tokenizer per language,
METEOR refused outside English, the English encoder's warning, a local multilingual one."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import orchestrator as orc
from orchestrator.compute import distilled, embeddings, languages, metrics
from orchestrator.compute.tokenize import word_tokens
from orchestrator.errors import GraphError
from orchestrator.kinds.graphs import compile_graph

# Pairs we wrote: (language, a text, a text sharing some words with it).
PAIRS = {
    "ru": (
        "Новый ночной автобус начнёт ходить в понедельник.",
        "Ночной автобус начнёт ходить с понедельника.",
    ),
    "el": (
        "Το νέο νυχτερινό λεωφορείο ξεκινά τη Δευτέρα.",
        "Το νυχτερινό λεωφορείο ξεκινά από τη Δευτέρα.",
    ),
    "ar": (
        "تبدأ الحافلة الليلية الجديدة العمل يوم الاثنين.",
        "الحافلة الليلية تبدأ العمل يوم الاثنين القادم.",
    ),
    "zh": ("新的夜间公交车将于星期一开始运行。", "夜间公交车星期一开始运行。"),
    "ja": ("新しい深夜バスは月曜日から運行を始めます。", "深夜バスは月曜日から走ります。"),
}

ENGLISH_PAIRS = [
    ("The quick brown fox jumps over the lazy dog.", "A quick brown dog jumps over the fox!"),
    ("Running runners ran; they're RUNNING again in 2024.", "the runner runs again in 2024"),
    ("snake_case and kebab-case words, e-mail & U.S.A.", "snake case, kebab case; email USA"),
    ("Prices rose 3.5% (Q3) vs. 2.1% in Q2.", "prices rose in q3 and fell in q2"),
    ("   leading spaces\tand\ttabs\nnewlines   ", "spaces and tabs and new lines"),
    ("It's the students' generalization of connections.", "The student generalizes connection."),
]


@pytest.fixture(autouse=True)
def _fresh_warnings() -> None:
    languages.forget_warnings()


# -- tokens --------------------------------------------------------------------------------


def test_word_tokens_in_scripts_with_and_without_spaces() -> None:
    assert word_tokens("Привет, МИР! Straße_2") == ["привет", "мир", "strasse", "2"]
    assert word_tokens("東京は2026年") == ["東", "京", "は", "2026", "年"]
    # Combining marks stay with their letter: Devanagari vowel signs, Thai tone marks.
    assert word_tokens("नमस्ते दुनिया") == ["नमस्ते", "दुनिया"]
    assert word_tokens("สวัสดี") == ["ส", "วั", "ส", "ดี"]
    assert word_tokens("안녕하세요 세계") == ["안녕하세요", "세계"]  # Korean is spaced
    assert word_tokens("ab cd", characters=True) == ["a", "b", "c", "d"]


def test_script_and_language_tags() -> None:
    assert languages.script_of("Hello, world") == languages.LATIN
    assert languages.script_of("Привет, world") == languages.OTHER
    assert languages.script_of("我很高兴") == languages.HAN
    assert languages.script_of("東京へ行きます") == languages.KANA
    assert languages.script_of("123 !?") is None
    assert languages.primary("pt-BR") == "pt" and languages.primary("EN_us") == "en"
    assert languages.is_english("English") and not languages.is_english("de")
    assert languages.not_english(None, "plain English") is None
    assert languages.not_english("de", "Hallo") == "tagged 'de'"
    assert languages.not_english(None, "Привет") == "in a non-Latin script"


# -- ROUGE ---------------------------------------------------------------------------------


@pytest.mark.parametrize("stemmer", [True, False])
def test_rouge_on_english_is_rouge_scores_own(stemmer: bool) -> None:
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    reference = rouge_scorer.RougeScorer(list(metrics.ROUGE_TYPES), use_stemmer=stemmer)
    for a, b in ENGLISH_PAIRS:
        want = reference.score(a, b)
        for language in (None, "en"):
            got = metrics.rouge(a, b, stemmer=stemmer, language=language)
            assert got == {k: want[k].fmeasure for k in metrics.ROUGE_TYPES}, (a, b)


@pytest.mark.parametrize("language", sorted(PAIRS))
def test_rouge_in_other_scripts(language: str) -> None:
    pytest.importorskip("rouge_score")
    text, other = PAIRS[language]
    # rouge-score's own tokens are [a-z0-9] only: a text was 0 against itself.
    assert metrics.rouge(text, text, tokenize="rouge-score")["rouge1"] == 0.0
    for tag in (language, None):
        assert metrics.rouge(text, text, language=tag) == {
            "rouge1": 1.0,
            "rouge2": 1.0,
            "rougeL": 1.0,
        }
        overlap = metrics.rouge(text, other, language=tag)
        assert all(0 < value < 1 for value in overlap.values()), overlap
    assert 0 < metrics.rouge(text, other, tokenize="char")["rouge1"] < 1


def test_rouge_stems_english_only() -> None:
    pytest.importorskip("rouge_score")
    # Porter turns "connections" into "connect": right for English, wrong for German.
    assert metrics.rouge("connections", "connect")["rouge1"] == 1.0
    assert metrics.rouge("connections", "connect", language="de")["rouge1"] == 0.0


# -- BLEU ----------------------------------------------------------------------------------


def test_bleu_tokenizer_per_language_and_script() -> None:
    japanese = "ja-mecab" if metrics._importable("MeCab", "ipadic") else "char"
    assert metrics.bleu_tokenizer("zh-Hans", "x") == "zh"
    assert metrics.bleu_tokenizer("ja", "x") == japanese
    assert metrics.bleu_tokenizer("th", "x") == "char"
    assert metrics.bleu_tokenizer("ru", "Привет") == "intl"
    assert metrics.bleu_tokenizer("de", "Grüße aus Köln") == "13a"
    assert metrics.bleu_tokenizer(None, "The cat") == "13a"
    assert metrics.bleu_tokenizer(None, "我很高兴") == "zh"
    assert metrics.bleu_tokenizer(None, "東京へ行きます") == japanese
    assert metrics.bleu_tokenizer(None, "สวัสดีครับ") == "char"
    assert metrics.bleu_tokenizer(None, "Καλημέρα") == "intl"


@pytest.mark.parametrize("language", sorted(PAIRS))
def test_bleu_in_other_scripts(language: str) -> None:
    pytest.importorskip("sacrebleu")
    text, other = PAIRS[language]
    for tag in (language, None):
        same = metrics.bleu(text, text, language=tag)
        assert same["score"] == pytest.approx(100.0)
        assert f"tok:{same['tokenize']}" in same["signature"]
        assert 0 < metrics.bleu(text, other, language=tag)["score"] < 100
    if language in ("zh", "ja"):
        # 13a sees one "word" per sentence there: any difference scores 0.
        assert metrics.bleu(text, other, tokenize="13a")["score"] == 0.0


def test_bleu_refuses_a_tokenizer_it_would_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("sacrebleu")
    import sacrebleu.utils

    monkeypatch.setattr(sacrebleu.utils, "SACREBLEU_DIR", str(tmp_path))
    metrics._bleu_metric.cache_clear()
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        metrics.bleu("a b", "a b", tokenize="flores200")


# -- METEOR --------------------------------------------------------------------------------


def test_meteor_outside_english_is_unavailable_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("nltk")
    text, other = PAIRS["ru"]
    with caplog.at_level(logging.WARNING):
        tagged = [metrics.meteor("Guten Morgen", "Guten Tag", language="de") for _ in range(3)]
        untagged = metrics.meteor(text, other)
    assert tagged[0] == {
        "available": False,
        "reason": "unavailable: meteor is English-only (WordNet), this row is tagged 'de'",
    }
    assert untagged["available"] is False and "non-Latin" in untagged["reason"]
    lines = [r for r in caplog.records if "English WordNet" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING


GRAPH = """\
name: g
inputs: [a, b]
optional_inputs: [language]
prompts: prompts
params: {{language: {param}}}
nodes:
  m:
    kind: compute
    function: meteor
    args: {{reference: a, candidate: b, language: {language}}}
outputs: {{m: m}}
"""


@pytest.mark.parametrize(
    ("param", "language"),
    [("null", "\"'de'\""), ("ru", "params.language"), ("null", "\"'ja-JP'\"")],
)
def test_validate_refuses_meteor_for_a_language_the_graph_declares(
    tmp_path: Path, param: str, language: str
) -> None:
    pytest.importorskip("nltk")
    (tmp_path / "prompts").mkdir()
    graph = tmp_path / "g.yaml"
    graph.write_text(GRAPH.format(param=param, language=language))
    with pytest.raises(GraphError) as caught:
        compile_graph(graph)
    assert "'meteor' serves only en" in str(caught.value)
    assert "m.args.language" in str(caught.value) or "args.language" in str(caught.value)


@pytest.mark.parametrize(
    "language", ["\"'en-GB'\"", "params.language", '"language if language is defined else none"']
)
def test_validate_accepts_meteor_for_english_or_the_rows_language(
    tmp_path: Path, language: str
) -> None:
    pytest.importorskip("nltk")
    (tmp_path / "prompts").mkdir()
    graph = tmp_path / "g.yaml"
    graph.write_text(GRAPH.format(param="null", language=language))
    compile_graph(graph)


def test_a_run_over_non_english_rows_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("nltk")
    (tmp_path / "prompts").mkdir()
    graph = tmp_path / "g.yaml"
    graph.write_text(
        GRAPH.format(param="null", language='"language if language is defined else none"')
    )
    rows = [
        {"id": f"r{i}", "a": text, "b": other, "language": tag}
        for i, (tag, (text, other)) in enumerate(sorted(PAIRS.items()))
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    with caplog.at_level(logging.WARNING):
        orc.run(graph, data, out=tmp_path / "run", cache=False)
    results = [json.loads(x) for x in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    assert len(results) == len(PAIRS)
    assert all(r["m"]["available"] is False for r in results)
    assert all("English-only" in r["m"]["reason"] for r in results)
    lines = [r for r in caplog.records if "English WordNet" in r.getMessage()]
    assert len(lines) == 1
    # A second run in the same process (a notebook, a sweep) says it again, once.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        orc.run(graph, data, out=tmp_path / "run2", cache=False)
    assert len([r for r in caplog.records if "English WordNet" in r.getMessage()]) == 1


# -- embeddings ----------------------------------------------------------------------------


class _FakeEncoder:
    path = Path("model")

    def encode(self, texts: list[str]):
        import numpy as np

        return np.ones((len(texts), 2)) / np.sqrt(2)


def test_english_encoder_warns_once_naming_a_multilingual_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("numpy")
    monkeypatch.setattr(metrics, "encoder", lambda path: _FakeEncoder())
    with caplog.at_level(logging.WARNING):
        metrics.embedding_similarity("an English text", "another one")
        metrics.embedding_similarity("an English text", "another one", language="en")
        assert not caplog.records
        for tag in ("ru", "de", None):
            text, other = PAIRS["ru"]
            metrics.embedding_similarity(text, other, language=tag)
        # A folder the user chose may be multilingual: no warning is owed for it.
        metrics.embedding_similarity(*PAIRS["ja"], model_path="somewhere")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "English-only" in lines[0] and embeddings.MULTILINGUAL_ALTERNATIVE in lines[0]


def test_distilled_scorer_on_the_default_encoder_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Stub:
        embedding_model = None

        def score_one(self, text: str, context: str | None) -> dict[str, int]:
            return {"label": 1}

    monkeypatch.setattr(distilled, "load_scorer", lambda folder: Stub())
    with caplog.at_level(logging.WARNING):
        for text in PAIRS["zh"]:
            assert distilled.distilled_score(text, "dir", language="zh") == {"label": 1}
    assert len([r for r in caplog.records if "English-only" in r.getMessage()]) == 1


def _tiny_multilingual_encoder(folder: Path, texts: list[str]) -> Path:
    """A two-layer BERT with a character vocabulary of `texts`, saved as a sentence-
    transformers folder: random weights, but built here, with no download."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import SentenceTransformer
    from transformers import BertConfig, BertModel, BertTokenizerFast, set_seed

    chars = sorted({c for t in texts for c in t.casefold() if not c.isspace()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    set_seed(0)  # the random weights, the same on every run
    raw = folder / "raw"
    BertModel(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    # A plain encoder folder: sentence-transformers wraps it with mean pooling.
    target = folder / "tiny-multilingual"
    SentenceTransformer(str(raw), device="cpu", local_files_only=True).save(str(target))
    return target


def test_embedding_similarity_with_a_local_multilingual_encoder(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    texts = [t for pair in PAIRS.values() for t in pair]
    folder = _tiny_multilingual_encoder(tmp_path, texts)
    with caplog.at_level(logging.WARNING):
        for language, (text, other) in PAIRS.items():
            same = metrics.embedding_similarity(text, text, str(folder), language=language)
            assert same == {"score": pytest.approx(1.0, abs=1e-5), "model": "tiny-multilingual"}
            differs = metrics.embedding_similarity(text, other, str(folder))["score"]
            assert -1 <= differs < 1 - 1e-4
    assert not [r for r in caplog.records if "English-only" in r.getMessage()]


# -- shipped examples ----------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["perq_jury", "perq_distilled"])
def test_shipped_perq_examples_span_four_languages_two_non_latin(name: str) -> None:
    rows = [json.loads(x) for x in (ROOT / "examples" / f"{name}.jsonl").read_text().splitlines()]
    assert all(r.get("language") for r in rows)
    tags = {languages.primary(r["language"]) for r in rows}
    assert len(tags) >= 4, tags
    non_latin = {
        languages.primary(r["language"])
        for r in rows
        if languages.script_of(r["text"]) != languages.LATIN
    }
    assert len(non_latin) >= 2, non_latin
    # Every language is judged on all three platforms.
    for tag in tags:
        platforms = {r["platform"] for r in rows if languages.primary(r["language"]) == tag}
        assert platforms == {"X/Twitter", "Telegram", "LinkedIn"}, tag


def test_shipped_style_examples_hold_a_non_latin_triplet() -> None:
    rows = [
        json.loads(x) for x in (ROOT / "examples/style_ensemble.jsonl").read_text().splitlines()
    ]
    tagged = [r for r in rows if r.get("language") not in (None, "en")]
    assert any(
        languages.script_of(r["reference"], r["candidate_a"], r["candidate_b"]) != languages.LATIN
        for r in tagged
    )
