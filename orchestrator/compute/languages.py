"""Languages and scripts for the metric nodes: which language a row's tag names, which
script a text is mostly written in, and a warning said once instead of once per row.

Metrics differ in what they can serve: ROUGE and BLEU only need to know where words
begin and end, METEOR needs an English WordNet, an encoder knows the languages it was
trained on. This module is what they share to tell those cases apart.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from collections import Counter
from functools import lru_cache

log = logging.getLogger(__name__)

ENGLISH = "en"

# Scripts written without spaces between words: a word boundary cannot be seen, so the
# lexical metrics count characters there. Ranges are Unicode blocks.
_HAN_RANGES = (
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3005, 0x3007),  # 々 〆 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)
_KANA_RANGES = ((0x3040, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))
_UNSPACED_RANGES = (
    (0x0E00, 0x0E7F),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
)

# Script names `script_of` returns.
LATIN = "latin"
HAN = "han"
KANA = "kana"
HANGUL = "hangul"
UNSPACED = "unspaced"  # Thai, Lao, Khmer, Myanmar
OTHER = "other"  # any other letters: Cyrillic, Greek, Arabic, Hebrew, Devanagari ...

# Scripts whose words are not separated by spaces (each character is a token there).
CHARACTER_SCRIPTS = frozenset({HAN, KANA, UNSPACED})
_SCRIPT_NAMES = {
    HAN: "Chinese characters",
    KANA: "Japanese script",
    HANGUL: "Hangul",
    UNSPACED: "a Southeast Asian script",
    OTHER: "a non-Latin script",
}


def _within(code: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= code <= high for low, high in ranges)


@lru_cache(maxsize=4096)
def char_script(char: str) -> str | None:
    """The script of one letter or digit (see the names above); None for anything else."""
    category = unicodedata.category(char)
    if category[0] not in "LNM":
        return None
    code = ord(char)
    if _within(code, _HAN_RANGES):
        return HAN
    if _within(code, _KANA_RANGES):
        return KANA
    if _within(code, _UNSPACED_RANGES):
        return UNSPACED
    name = unicodedata.name(char, "")
    if name.startswith("HANGUL"):
        return HANGUL
    if name.startswith(("LATIN", "DIGIT")) or char.isascii():
        return LATIN
    return OTHER


def script_of(*texts: str) -> str | None:
    """The script most letters of `texts` are written in (kana wins over Han when both
    occur: Japanese mixes them, Chinese has no kana); None when there are no letters."""
    counts = Counter(
        script
        for text in texts
        for char in text
        if char.isalpha() and (script := char_script(char)) is not None
    )
    if not counts:
        return None
    if counts[KANA] and counts[HAN]:
        return KANA
    return counts.most_common(1)[0][0]


def primary(language: str | None) -> str | None:
    """The primary subtag of a language tag, lower-cased ('pt-BR' -> 'pt', 'EN_us' ->
    'en'); 'english' counts as 'en'. None when no language is given."""
    if not language or not str(language).strip():
        return None
    tag = str(language).strip().replace("_", "-").split("-")[0].casefold()
    return {"eng": ENGLISH, "english": ENGLISH}.get(tag, tag)


def is_english(language: str | None) -> bool:
    """The tag names English."""
    return primary(language) == ENGLISH


def not_english(language: str | None, *texts: str) -> str | None:
    """What says the texts are not English ("tagged 'de'", "in a non-Latin script"), or
    None: the row's language tag when it names another language, else a script English is
    not written in (a Russian text with no tag)."""
    declared = primary(language)
    if declared is not None:
        return None if declared == ENGLISH else f"tagged '{language}'"
    script = script_of(*texts)
    return None if script in (None, LATIN) else f"in {_SCRIPT_NAMES[script]}"


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str) -> bool:
    """Log `message` as a warning the first time `key` is seen in this process (so a run
    says it once, not once per row); True when it was logged now."""
    with _warned_lock:
        if key in _warned:
            return False
        _warned.add(key)
    log.warning(message)
    return True


def forget_warnings() -> None:
    """Let every warning be said again (tests, or a new run in a long-lived process)."""
    with _warned_lock:
        _warned.clear()
