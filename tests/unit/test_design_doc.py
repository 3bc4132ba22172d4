"""docs/design.md and docs/rest-api.md stay complete: every denial code with its status, every
REST route with its methods, every console page, every command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from protocols.denials import DenialCode

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
REST = (ROOT / "docs" / "rest-api.md").read_text(encoding="utf-8")
METHODS = ("get", "post", "put", "patch", "delete")


def routes(prefix: str) -> list[tuple[str, str, type]]:
    """(path with `{id}`-style holes as written in the document, URL name, view) under
    `prefix`."""
    found = []

    def walk(patterns: list[URLPattern | URLResolver], base: str) -> None:
        for pattern in patterns:
            route = str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, base + route)
            elif (base + route).startswith(prefix) and not route.startswith("^"):
                view = getattr(pattern.callback, "view_class", pattern.callback)
                found.append((base + route, pattern.name or "", view))

    walk(get_resolver().url_patterns, "")
    return found


def api_calls() -> list[str]:
    calls = []
    for path, _, view in routes("api/v1/"):
        written = re.sub(r"<\w+:\w+>", "{id}", path.removeprefix("api/v1/"))
        calls.extend(f"`{method.upper()} {written}" for method in METHODS if hasattr(view, method))
    return calls


def console_pages() -> list[str]:
    return ["`/" + re.sub(r"<\w+:\w+>", "<id>", path) + "`" for path, _, _ in routes("console/")]


def commands() -> list[str]:
    names = sorted(p.stem for p in ROOT.glob("*/management/commands/*.py")
                   if not p.stem.startswith("_"))
    scripts = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.suffix in {".sh", ".py"})
    return [f"manage.py {name}" for name in names] + [f"scripts/{name}" for name in scripts]


def test_the_lists_are_not_empty() -> None:
    assert len(api_calls()) >= 20
    assert len(console_pages()) >= 14
    assert "manage.py create_agent" in commands()


@pytest.mark.parametrize("code", list(DenialCode), ids=str)
def test_every_denial_code_is_in_the_catalogue_with_its_status(code: DenialCode) -> None:
    assert f"| `{code.value}` | {code.status} |" in DESIGN


@pytest.mark.parametrize("call", api_calls())
def test_every_rest_route_is_documented(call: str) -> None:
    assert call in REST


@pytest.mark.parametrize("page", console_pages())
def test_every_console_page_is_documented(page: str) -> None:
    assert page in DESIGN


@pytest.mark.parametrize("command", commands())
def test_every_command_is_documented(command: str) -> None:
    assert command in DESIGN
