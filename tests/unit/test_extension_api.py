"""Extensions declare the extension API version they implement (docs/design.md#extensions): a module
in `settings.DISPATCH_EXTENSIONS` without `EXTENSION_API`, or with a version this runtime does not
support, is refused before its `register(runtime)` runs, naming the module and both versions."""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from dispatch.runtime import EXTENSION_API_VERSION, Runtime, get_runtime

SHIPPED_EXTENSIONS = ("demo.extension", "bench.noop")


def _extension(monkeypatch: pytest.MonkeyPatch, name: str, **attributes: Any) -> list[Runtime]:
    """Install a module `name` whose `register` records each runtime it is handed."""
    calls: list[Runtime] = []
    module = types.ModuleType(name)
    for key, value in {"register": calls.append, **attributes}.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_the_supported_version_is_one() -> None:
    assert EXTENSION_API_VERSION == 1


@pytest.mark.parametrize("dotted", SHIPPED_EXTENSIONS)
def test_every_shipped_extension_declares_the_supported_version(dotted: str) -> None:
    module = importlib.import_module(dotted)
    assert module.EXTENSION_API == EXTENSION_API_VERSION
    assert type(module.EXTENSION_API) is int


def test_an_extension_declaring_the_version_registers(
    settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None
) -> None:
    calls = _extension(monkeypatch, "ext_current", EXTENSION_API=EXTENSION_API_VERSION)
    settings.DISPATCH_EXTENSIONS = ["ext_current"]
    assert calls == [get_runtime()]


def test_an_extension_without_a_version_is_refused(
    settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None
) -> None:
    calls = _extension(monkeypatch, "ext_unversioned")
    settings.DISPATCH_EXTENSIONS = ["ext_unversioned"]
    with pytest.raises(ImproperlyConfigured) as refused:
        get_runtime()
    message = str(refused.value)
    assert "'ext_unversioned'" in message
    assert "declares no EXTENSION_API" in message
    assert f"supports extension API version {EXTENSION_API_VERSION}" in message
    assert calls == []


@pytest.mark.parametrize("declared", [0, 2, "1", 1.0, True, None])
def test_an_extension_of_another_version_is_refused(
    declared: object, settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None
) -> None:
    calls = _extension(monkeypatch, "ext_other", EXTENSION_API=declared)
    settings.DISPATCH_EXTENSIONS = ["ext_other"]
    with pytest.raises(ImproperlyConfigured) as refused:
        get_runtime()
    message = str(refused.value)
    assert "'ext_other'" in message
    assert f"declares EXTENSION_API = {declared!r}" in message
    assert f"supports extension API version {EXTENSION_API_VERSION}" in message
    assert calls == []


def test_a_refused_extension_stops_the_ones_after_it(
    settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None
) -> None:
    later = _extension(monkeypatch, "ext_later", EXTENSION_API=EXTENSION_API_VERSION)
    _extension(monkeypatch, "ext_future", EXTENSION_API=EXTENSION_API_VERSION + 1)
    settings.DISPATCH_EXTENSIONS = ["ext_future", "ext_later"]
    with pytest.raises(ImproperlyConfigured, match="ext_future"):
        get_runtime()
    assert later == []
