"""Opaque random prefixed ids (docs/design.md#concepts): the prefix says the kind, the rest says
nothing."""

from __future__ import annotations

import secrets

PREFIXES = frozenset({
    "ten", "prn", "tok", "grt", "res", "rev", "prp", "apr", "dec", "prm", "op", "exe", "att",
    "evr", "lse", "ren", "dlg", "vot", "wwt", "whk", "msg", "nat", "pau", "scp",
    "rvt",
})


def new_id(prefix: str) -> str:
    if prefix not in PREFIXES:
        raise ValueError(f"unknown id prefix {prefix!r}")
    return f"{prefix}_{secrets.token_urlsafe(16).replace('-', 'x').replace('_', 'y')}"
