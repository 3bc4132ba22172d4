"""The Python client of the exact-action console (`clients/python/README.md`).

    from exact_console import Client

    with Client("http://127.0.0.1:8000", token) as console:
        proposal = console.propose("crm.lookup", {"customer_id": "cus-001"}, call_id="c-1")
        proposal = console.wait_for_decision(proposal["id"], timeout=600)
        dispatched = console.dispatch(proposal["id"])
        operation = console.wait_for_outcome(dispatched["operation_id"], timeout=60)

Answers are the API's JSON objects as dicts, typed by `exact_console.shapes`. A refusal raises
`Denied` (`.code`, `.status`, `.message`, `.details`); a wait past its timeout raises `Timeout`;
a console away for a moment (a deploy, a proxy's 503) is retried as `Retry` says. No Django,
only httpx.
"""

from exact_console import shapes
from exact_console._calls import SETTLED_STATES
from exact_console._retry import Retry
from exact_console._version import __version__
from exact_console.client import AsyncClient, Client
from exact_console.errors import Denied, Error, Timeout, TransportError
from exact_console.tools import Tool, atools, tools

__all__ = [
    "SETTLED_STATES",
    "AsyncClient",
    "Client",
    "Denied",
    "Error",
    "Retry",
    "Timeout",
    "Tool",
    "TransportError",
    "__version__",
    "atools",
    "shapes",
    "tools",
]
