"""Which writing systems a domain label uses, to flag labels that mix them (UTS #39 §5.1-5.2).

A label such as `pаypal` (a Cyrillic `а` among Latin letters) is a valid IDNA2008 label that
reads as another name. `is_mixed_script` flags such a label unless its scripts form one of the
combinations UTS #39 calls "highly restrictive" (Latin with Han and Japanese kana, with Han and
Bopomofo, or with Han and Hangul), which are ordinary in Chinese, Japanese and Korean names.

The standard library has no Unicode Script property, so a character's script is read from the
first word of its Unicode name (`LATIN SMALL LETTER A`, `CYRILLIC SMALL LETTER A`,
`CJK UNIFIED IDEOGRAPH-6771`), with digits, the hyphen, combining marks and the few common
signs IDNA2008 allows counted as belonging to no script. For the letters IDNA2008 permits in
a label this gives the Script property's answer; two historic scripts that share a first word
(`OLD ITALIC`, `OLD PERSIAN`) would count as one, which can only miss a warning between them.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Final

__all__ = ["is_mixed_script", "scripts"]

# Name prefixes of characters that belong to no one script (Script=Common or Inherited).
_NO_SCRIPT: Final = ("DIGIT ", "HYPHEN-MINUS", "COMBINING ", "MIDDLE DOT", "MODIFIER LETTER ",
                     "KATAKANA-HIRAGANA ", "ZERO WIDTH ", "VARIATION SELECTOR", "FULL STOP",
                     "LOW LINE")
# First words of a name that are not the script's own name.
_ALIASES: Final[Mapping[str, str]] = {
    "CJK": "Han",
    "IDEOGRAPHIC": "Han",
    "EXTENDED": "Arabic",  # EXTENDED ARABIC-INDIC DIGIT ...
}
# UTS #39 §5.2 "highly restrictive": single script, or within one of these sets.
_ALLOWED_MIXES: Final = (
    frozenset({"Latin", "Han", "Hiragana", "Katakana"}),
    frozenset({"Latin", "Han", "Bopomofo"}),
    frozenset({"Latin", "Han", "Hangul"}),
)


def _script(char: str) -> str | None:
    name = unicodedata.name(char, "")
    if not name:
        return "Unknown"
    if name.startswith(_NO_SCRIPT):
        return None
    word = name.split(" ", 1)[0]
    if word in _ALIASES:
        return _ALIASES[word]
    return word.split("-", 1)[0].title()  # ARABIC-INDIC DIGIT ONE -> Arabic


def scripts(text: str) -> frozenset[str]:
    """The scripts of `text`'s characters, named in title case (`Latin`, `Cyrillic`, `Han`);
    digits, hyphens, combining marks and other script-neutral characters add none."""
    return frozenset(s for s in map(_script, text) if s is not None)


def is_mixed_script(text: str) -> bool:
    """Does `text` use more than one script, outside the CJK combinations UTS #39 allows?"""
    found = scripts(text)
    if len(found) <= 1:
        return False
    return not any(found <= allowed for allowed in _ALLOWED_MIXES)
