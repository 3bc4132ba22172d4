"""The text a workflow span's region covers, for tests of diagnostics' start and end."""

from __future__ import annotations

from protocols.workflow import Span


def covered(text: str, span: Span) -> str:
    """The text from a span's start up to its (exclusive) end; lines and columns are 1-based."""
    lines = text.splitlines(keepends=True)
    start = sum(map(len, lines[:span.line - 1])) + span.column - 1
    end = sum(map(len, lines[:span.end_line - 1])) + span.end_column - 1
    return text[start:end]
