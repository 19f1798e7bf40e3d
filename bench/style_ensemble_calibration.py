"""Does a style ensemble beat its best single metric? A held-out check on calibration triplets.

Scores every triplet with the non-LLM metrics in-process (BLEU, ROUGE-1/2/L, METEOR when
WordNet is installed, embedding cosine), then runs the `style_stacking` aggregate: over
seeded random half splits it picks the best single metric, PWV weights and stacking
weights on one half and scores the other. The LLM judge is left out (it needs a server).

    python bench/style_ensemble_calibration.py
    python bench/style_ensemble_calibration.py --splits 500 --embedding-model /models/style-emb
    python bench/style_ensemble_calibration.py --write-triplets   # rebuild the triplets file

The default data is synthetic: texts we wrote for six invented authors. See docs/metrics.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.compute import metrics, stacking, votes  # noqa: E402

POOL = ROOT / "examples" / "style_authors.jsonl"
TRIPLETS = ROOT / "examples" / "style_authors_triplets.jsonl"
SETS = {
    "ngram": ["bleu", "rouge1", "rouge2", "rougeL", "meteor"],
    "non_llm": ["bleu", "rouge1", "rouge2", "rougeL", "meteor", "embedding"],
}


def build_triplets(pool: Path = POOL, seed: int = 0) -> list[dict[str, Any]]:
    """AA, DD and LLM triplets from the author pool; seeded, so the file can be rebuilt."""
    rng = random.Random(seed)
    lines = [json.loads(line) for line in pool.read_text(encoding="utf-8").splitlines() if line]
    texts: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        if line["domain"] != "llm":
            texts.setdefault(line["author"], []).append(line)
    domain = {author: items[0]["domain"] for author, items in texts.items()}
    rows: list[dict[str, Any]] = []

    def add(setting: str, key: str, reference: str, positive: str, negative: str) -> None:
        first = rng.choice("ab")
        a, b = (positive, negative) if first == "a" else (negative, positive)
        rows.append(
            {
                "id": f"{setting}-{key}",
                "setting": setting,
                "reference": reference,
                "candidate_a": a,
                "candidate_b": b,
                "positive": first,
            }
        )

    for author, items in texts.items():
        same = [o for o in texts if o != author and domain[o] == domain[author]]
        other = [o for o in texts if domain[o] != domain[author]]
        # Four (reference, positive) pairs per author: consecutive texts on other topics.
        for k in range(4):
            reference, positive = items[k]["text"], items[k + 1]["text"]
            aa = rng.choice(texts[rng.choice(same)])["text"]
            dd = rng.choice(texts[rng.choice(other)])["text"]
            add("AA", f"{author}-{k}", reference, positive, aa)
            add("DD", f"{author}-{k}", reference, positive, dd)
    for k, line in enumerate(x for x in lines if x["domain"] == "llm"):
        reference = rng.choice(texts[line["author"]])["text"]
        add("LLM", f"{line['author']}-{k}", reference, line["personalized"], line["generic"])
    return rows


def score(rows: list[dict[str, Any]], wordnet: str | None, model: str | None) -> list[dict]:
    """Each triplet's metric votes, as the graph's `votes` output would hold them."""
    results = []
    for row in rows:
        pairs: dict[str, list[Any]] = {name: [] for name in SETS["non_llm"]}
        for side in ("candidate_a", "candidate_b"):
            ref, cand = row["reference"], row[side]
            pairs["bleu"].append(metrics.bleu(ref, cand))
            r = metrics.rouge(ref, cand)
            for name in ("rouge1", "rouge2", "rougeL"):
                pairs[name].append(r[name])
            pairs["meteor"].append(metrics.meteor(ref, cand, wordnet))
            pairs["embedding"].append(metrics.embedding_similarity(ref, cand, model))
        scored = votes.pair_scores(pairs)
        results.append(
            {
                **row,
                "votes": votes.pair_votes(scored["pairs"]),
                "unavailable": scored["unavailable"],
            }
        )
    return results


def report(results: list[dict], splits: int, seed: int, l2: float, form: str) -> None:
    """Print per-metric accuracy and the held-out comparison per metric set."""
    settings = Counter(r["setting"] for r in results)
    print(
        f"triplets: {len(results)} ({', '.join(f'{s} {n}' for s, n in sorted(settings.items()))})"
    )
    acc = votes.style_accuracy(results)["metrics"]
    print("single metrics, all rows (pooled accuracy / mean over settings):")
    for name, col in acc.items():
        if col["available"]:
            print(f"  {name:10s} {col['overall']:.3f} / {col['mean']:.3f}")
        else:
            print(f"  {name:10s} unavailable: {col['reason']}")
    out = stacking.style_stacking(results, SETS, l2, splits, seed, form)
    held = out["heldout"]
    print(
        f"held-out: {held['splits']} random half splits (seed {seed}), fit on "
        f"{held['fit_rows']} rows, scored on {held['test_rows']}; PWV weight form {form}, "
        f"stacking L2 {l2}"
    )
    for name, block in held["sets"].items():
        if not block["available"]:
            print(f"set {name}: {block['reason']}")
            continue
        weights = out["fit"]["sets"][name]["weights"]
        print(f"set {name}: {', '.join(block['members'])}")
        print(f"  stacking weights fit on all rows: {json.dumps(weights)}")
        m = block["mean"]
        print(
            f"  mean held-out accuracy: best single {m['best_single']:.3f}, MV {m['mv']:.3f}, "
            f"PWV {m['pwv']:.3f}, LR {m['lr']:.3f}"
        )
        print(f"  best single picked on the fit half: {json.dumps(block['best_single_picked'])}")
        for ens in ("mv", "pwv", "lr"):
            v = block["versus_best_single"][ens]
            print(
                f"  {ens.upper():3s} vs best single: wins {v['wins']}, ties {v['ties']}, "
                f"losses {v['losses']} (wins on {v['share_wins']:.1%} of splits)"
            )
        print(f"  verdict: {block['verdict']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=TRIPLETS)
    parser.add_argument("--splits", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--l2", type=float, default=1.0)
    parser.add_argument("--weight-form", default="accuracy", choices=votes.WEIGHT_FORMS)
    parser.add_argument("--wordnet-dir", default=None)
    parser.add_argument("--embedding-model", default=None)
    parser.add_argument("--write-triplets", action="store_true", help=f"rebuild {TRIPLETS.name}")
    args = parser.parse_args()
    if args.write_triplets:
        rows = build_triplets()
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
        TRIPLETS.write_text(text, encoding="utf-8")
        print(f"wrote {len(rows)} triplets to {TRIPLETS}")
        return
    lines = args.data.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    results = score(rows, args.wordnet_dir, args.embedding_model)
    report(results, args.splits, args.seed, args.l2, args.weight_form)


if __name__ == "__main__":
    main()
