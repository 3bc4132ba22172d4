"""An adapter imported without its framework says which extra of the package to install,
instead of a bare `ModuleNotFoundError`."""

from __future__ import annotations

import importlib
import sys

import pytest

#: Each adapter, the framework module it needs, and the extra that brings it (pyproject.toml).
ADAPTERS = [
    ("langchain", "langchain_core", "langchain"),
    ("langgraph", "langgraph", "langchain"),
    ("openai_agents", "agents", "openai-agents"),
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("permits", "jwt", "permits"),
]


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_an_adapter_without_its_framework_names_the_extra(
        monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str) -> None:
    # The framework as if not installed: None in sys.modules makes every import of it fail
    # with ModuleNotFoundError, as a missing package does.
    for name in [n for n in sys.modules if n == framework or n.startswith(framework + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, f"exact_console.{adapter}", raising=False)
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module(f"exact_console.{adapter}")
    message = str(caught.value)
    assert f"exact_console.{adapter}" in message
    assert f"pip install 'exact-console[{extra}]'" in message
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)


def test_another_missing_module_is_not_blamed_on_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A module the extra does not bring (here: httpx, the client's own dependency) keeps its
    # own error.
    for name in [n for n in sys.modules if n == "exact_console" or n.startswith(
            ("exact_console.", "httpx"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(ModuleNotFoundError) as caught:
        importlib.import_module("exact_console.langchain")
    assert "exact-console[" not in str(caught.value)
