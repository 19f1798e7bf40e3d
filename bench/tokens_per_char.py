"""Tokens per character of the embedded model's tokenizer, per language of the PerQ example
posts: how far its vocabulary was built for English (docs/metrics.md, "Languages").

    .venv/bin/python bench/tokens_per_char.py [--data examples/perq_jury.jsonl]

Needs the prepared model folder (`orchestrator serve` or `make demo` once) and the
`tokenizers` package that transformers brings.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from tokenizers import Tokenizer

from orchestrator.local.model import default_model_dir

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT / "examples" / "perq_jury.jsonl")
    args = parser.parse_args()
    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokens: dict[str, int] = defaultdict(int)
    chars: dict[str, int] = defaultdict(int)
    for line in args.data.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        language = row.get("language", "?")
        tokens[language] += len(tokenizer.encode(row["text"], add_special_tokens=False).ids)
        chars[language] += len(row["text"])
    for language in sorted(tokens, key=lambda name: tokens[name] / chars[name]):
        ratio = tokens[language] / chars[language]
        print(f"{language}: {ratio:.2f} tokens per character ({chars[language]} characters)")


if __name__ == "__main__":
    main()
