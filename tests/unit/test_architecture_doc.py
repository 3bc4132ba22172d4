"""docs/architecture.md stays true: every module and function it names still exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()
DOTTED = sorted(set(re.findall(r"`((?:dispatch|console|protocols|demo)(?:\.\w+)+)`", DOC)))
FILES = sorted(set(re.findall(r"`(tests/[\w/]+\.py)`", DOC)))


def resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def test_the_document_names_the_path() -> None:
    assert len(DOTTED) > 40
    assert "dispatch.services.dispatcher.proposal_dispatch" in DOTTED


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_named_module_and_function_exists(dotted: str) -> None:
    assert resolve(dotted) is not None


@pytest.mark.parametrize("path", FILES)
def test_every_named_test_exists(path: str) -> None:
    assert (ROOT / path).is_file()
