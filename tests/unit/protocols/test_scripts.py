"""Scripts of a domain label, and which mixtures are flagged (UTS #39 highly restrictive)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.scripts import is_mixed_script, scripts

CYRILLIC_LOOKALIKES = "\u0430\u0435\u043e\u0440\u0441\u0443\u0445"  # а е о р с у х


@pytest.mark.parametrize(
    ("label", "found"),
    [("paypal", {"Latin"}), ("p\u0430ypal", {"Latin", "Cyrillic"}), ("bücher", {"Latin"}),
     ("москва", {"Cyrillic"}), ("ελλάδα", {"Greek"}), ("東京", {"Han"}),
     ("ラーメン", {"Katakana"}), ("abc-123", {"Latin"}), ("123", set()),
     ("bu\u0308cher", {"Latin"}), ("l·l", {"Latin"})],
)
def test_scripts_of_a_label(label: str, found: set[str]) -> None:
    assert scripts(label) == found


@pytest.mark.parametrize(
    "label",
    ["p\u0430ypal", "\u0430pple", "g\u043e\u043egle", "αβγabc", "micro\u0455oft", "münchen-ελ",
     "москва-city"],
)
def test_label_mixing_scripts_is_flagged(label: str) -> None:
    assert is_mixed_script(label)


@pytest.mark.parametrize(
    "label",
    ["paypal", "bücher", "москва", "ελλάδα", "東京", "ラーメン", "東京ラーメン", "とうきょう東京",
     "abc東京", "한국abc", "中文注音ㄓ", "123", "xn--pypal-4ve", "l·l"],
)
def test_single_script_or_cjk_mixture_is_not_flagged(label: str) -> None:
    assert not is_mixed_script(label)


latin = st.text("abcdefghijklmnopqrstuvwxyzäöüéß0123456789-", min_size=1, max_size=20)


@given(latin)
def test_latin_alone_is_never_flagged(label: str) -> None:
    assert not is_mixed_script(label)


@given(latin.filter(lambda s: any(c.isalpha() for c in s)), st.integers(min_value=0),
       st.sampled_from(CYRILLIC_LOOKALIKES))
def test_one_cyrillic_lookalike_among_latin_letters_is_flagged(
    label: str, at: int, lookalike: str,
) -> None:
    position = at % (len(label) + 1)
    assert is_mixed_script(label[:position] + lookalike + label[position:])
