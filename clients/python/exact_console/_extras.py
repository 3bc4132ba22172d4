"""An adapter's framework is an extra of the package (pyproject.toml): imported without it, the
adapter says which extra to install instead of a bare `ModuleNotFoundError`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def needs(module: str, extra: str, *frameworks: str) -> Iterator[None]:
    """Around the framework imports of adapter `module`: a missing `frameworks` module is a
    `ModuleNotFoundError` naming `extra`; any other missing module keeps its own error."""
    try:
        yield
    except ModuleNotFoundError as missing:
        if (missing.name or "").partition(".")[0] not in frameworks:
            raise
        raise ModuleNotFoundError(
            f"{module} needs {missing.name}, which is not installed: "
            f"pip install 'exact-console[{extra}]'", name=missing.name) from missing
