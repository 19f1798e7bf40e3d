"""Word tokens for the lexical metrics in any script.

rouge-score's own tokenizer keeps only `[a-z0-9]`, so a Russian or Chinese text scores 0
against itself. Here a word is a run of Unicode letters, digits and the marks that go with
them, case-folded; in scripts written without spaces (Chinese, Japanese, Thai, Lao, Khmer,
Myanmar) every character is a token, since word boundaries are not in the text. On ASCII
text the tokens are exactly rouge-score's.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from .languages import CHARACTER_SCRIPTS, char_script

_STEM_MIN_LENGTH = 4  # rouge-score stems only words longer than 3 characters


def word_tokens(text: str, *, characters: bool = False) -> list[str]:
    """Case-folded tokens of `text`: words, or single characters in scripts without spaces
    (everywhere with `characters`). A combining mark stays with the letter before it."""
    tokens: list[str] = []
    word: list[str] = []
    open_char = False  # the last token is one character that a following mark joins

    def flush() -> None:
        if word:
            tokens.append("".join(word))
            word.clear()

    for char in unicodedata.normalize("NFC", text).casefold():
        script = char_script(char)
        if script is None:
            flush()
            open_char = False
        elif unicodedata.category(char).startswith("M") and (word or open_char):
            if word:
                word.append(char)
            else:
                tokens[-1] += char
        elif characters or script in CHARACTER_SCRIPTS:
            flush()
            tokens.append(char)
            open_char = True
        else:
            word.append(char)
            open_char = False
    flush()
    return tokens


class UnicodeTokenizer:
    """A rouge-score tokenizer (it calls `tokenize`) over `word_tokens`, with rouge-score's
    Porter stemming of ASCII words when `stem` is given."""

    def __init__(self, characters: bool = False, stem: Callable[[str], str] | None = None):
        self.characters = characters
        self.stem = stem

    def tokenize(self, text: str) -> list[str]:
        """The tokens ROUGE counts."""
        tokens = word_tokens(text, characters=self.characters)
        if self.stem is None:
            return tokens
        stem = self.stem
        # The Porter stemmer knows English suffixes only: other scripts are left whole.
        return [stem(t) if len(t) >= _STEM_MIN_LENGTH and t.isascii() else t for t in tokens]
