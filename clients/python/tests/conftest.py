"""The adapters' tests share one scripted console (`scripted.Console`) and a client talking to
it through `httpx.MockTransport`; a module may override either fixture."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from scripted import Console

from exact_console import Client


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def client(console: Console) -> Iterator[Client]:
    with Client("http://console.test", "eac_agent", transport=httpx.MockTransport(console)) as c:
        yield c
