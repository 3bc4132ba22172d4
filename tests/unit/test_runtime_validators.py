"""Validators come from extensions, like contracts: the demo extension registers the shipped
`cited-sources@1`, a runtime without extensions trusts none, and another extension registers a
validator of its own through `runtime.register_validator(name, version, policy, fn)`."""

from __future__ import annotations

import sys
import types
from collections.abc import Mapping
from typing import Any

import pytest

from dispatch.runtime import EXTENSION_API_VERSION, Runtime, get_runtime
from protocols.evidence import (
    CITED_SOURCES_V1,
    Finding,
    Judgement,
    ReceiptView,
    ReportView,
    StoredBytes,
    ValidatorConflictError,
    cited_sources_v1,
)


def _judge(report: ReportView, receipts: Mapping[str, ReceiptView],
           stored_bytes: StoredBytes) -> Judgement:
    return Judgement("fail", (Finding(None, "the model found no support"),))


def test_the_demo_extension_registers_the_shipped_validator(fresh_runtime: None) -> None:
    runtime = get_runtime()
    assert list(runtime.validators) == [CITED_SOURCES_V1]
    assert runtime.validators.for_policy("cited-sources/1") == CITED_SOURCES_V1


def test_without_extensions_no_validator_is_trusted(settings: Any, fresh_runtime: None) -> None:
    settings.DISPATCH_EXTENSIONS = []
    runtime = get_runtime()
    assert list(runtime.validators) == []
    assert runtime.validators.for_policy("cited-sources/1") is None


def test_an_extension_registers_a_validator_of_its_own(
    settings: Any, monkeypatch: pytest.MonkeyPatch, fresh_runtime: None
) -> None:
    def register(runtime: Runtime) -> None:
        runtime.register_validator("llm-judge", 1, "supported-claims/1", _judge)

    module = types.ModuleType("ext_judge")
    module.EXTENSION_API = EXTENSION_API_VERSION  # type: ignore[attr-defined]
    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "ext_judge", module)
    settings.DISPATCH_EXTENSIONS = ["demo.extension", "ext_judge"]
    runtime = get_runtime()
    spec = runtime.validators.for_policy("supported-claims/1")
    assert spec is not None
    assert (spec.validator_label, spec.fn) == ("llm-judge@1", _judge)
    assert [s.validator_label for s in runtime.validators] == ["cited-sources@1", "llm-judge@1"]


def test_register_validator_refuses_a_second_meaning(fresh_runtime: None) -> None:
    runtime = get_runtime()
    again = runtime.register_validator("cited-sources", 1, "cited-sources/1", cited_sources_v1)
    assert again == CITED_SOURCES_V1
    with pytest.raises(ValidatorConflictError, match="cited-sources@1 is already registered"):
        runtime.register_validator("cited-sources", 1, "cited-sources/1", _judge)
    with pytest.raises(ValidatorConflictError, match="already served"):
        runtime.register_validator("llm-judge", 1, "cited-sources/1", _judge)
    assert runtime.validators.for_policy("cited-sources/1") == CITED_SOURCES_V1
