"""The environment the settings read, where any variable may come from a file.

`X_FILE=/run/secrets/x` gives `X` the file's content, less its trailing line break (as `echo`
and editors leave one): a secret (`SECRET_KEY`, `SIGNING_KEYS`, the database, broker and cache
URLs with their passwords, `NOTIFY_WEBHOOKS`, `METRICS_TOKEN`, …) then never sits in the process
environment. The file is read when the settings ask for `X`, at settings load. `X` and `X_FILE`
both set, or a file that cannot be read as UTF-8 text, is an error naming the variable, never a
value (docs/deployment.md#secrets).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

FILE_SUFFIX = "_FILE"


class FileOrEnvironment(Mapping[str, str]):
    """`environ` (the process environment), with `X` read from the file `X_FILE` names."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def __getitem__(self, name: str) -> str:
        path = self._environ.get(name + FILE_SUFFIX, "")
        if not path:
            return self._environ[name]
        if name in self._environ:
            raise ImproperlyConfigured(
                f"{name} and {name}{FILE_SUFFIX} are both set: set one of them.")
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or type(error).__name__
            raise ImproperlyConfigured(
                f"{name}{FILE_SUFFIX}: cannot read {path} ({reason}).") from None
        return text.rstrip("\r\n")

    def __iter__(self) -> Iterator[str]:
        return iter(self._environ)

    def __len__(self) -> int:
        return len(self._environ)
