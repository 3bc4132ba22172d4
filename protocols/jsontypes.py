"""The types of JSON as decoded, named once for every package.

`json.loads`, DRF's `request.data` and a `JSONField` hand back plain Python values: `None`,
`bool`, `int`, `float`, `str`, `list` and `dict` with string keys, nested. `JSONValue` is one
such value and `JSONObject` one such object (action arguments, denial details, payloads,
snapshots, API bodies). Both stay open (`Any`) inside so that code which has already checked a
value against its schema can index and compare it without a cast at every step; what the
name says is that the value came from, or goes to, JSON, not that it is arbitrary.
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["JSONObject", "JSONValue"]

JSONValue: TypeAlias = Any
"""A JSON value as decoded: None, bool, int, float, str, list or dict (nested)."""

JSONObject: TypeAlias = dict[str, Any]
"""A JSON object as decoded: string keys, `JSONValue` values."""
