"""Following the calls of one function through our own code: which modules it visits and how
often it comes back to one of them (how much a path wanders).

`follow(fn)` runs `fn` under `sys.setprofile` and keeps each call whose code lives in one of our
packages (`protocols`, `dispatch`, `console`, `demo`). A *visit* is a module the walk enters; a
*return* is an arrow (a caller's module to a callee's) first taken into a module the walk had
already visited: the walk comes back to it. Each arrow counts once, however often it is taken.
A path that reads top to bottom visits few modules and never returns.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
OURS = ("protocols", "dispatch", "console", "demo")
T = TypeVar("T")


def _module(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in OURS or relative.suffix != ".py":
        return None
    return relative.with_suffix("").as_posix().replace("/", ".")


@dataclass
class Walk:
    root: str
    visits: list[str] = field(default_factory=list)  # modules, in the order first entered
    returns: list[str] = field(default_factory=list)  # "caller -> module" of each return

    def __str__(self) -> str:
        return (f"{self.root}: {len(self.visits)} modules, {len(self.returns)} returns\n"
                f"  visits: {', '.join(self.visits)}\n"
                f"  returns: {', '.join(self.returns) or '-'}")


def follow(fn: Callable[[], T], *, root: str) -> tuple[T, Walk]:
    """Run `fn`; the walk of the calls made from the first call of `root` (a function's
    qualified name as `module:function`) on, until it returns."""
    module_name, _, function = root.partition(":")
    walk = Walk(root)
    stack: list[str | None] = []  # our module of each frame since the root (None: not ours)
    names: dict[str, str | None] = {}
    arrows: set[str] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        filename = frame.f_code.co_filename
        if filename not in names:
            names[filename] = _module(filename)
        module = names[filename]
        if not stack:
            if event == "call" and module == module_name and frame.f_code.co_name == function:
                stack.append(module)
                walk.visits.append(module)
            return
        if event == "return":
            stack.pop()
            return
        if module is not None:
            caller = next((m for m in reversed(stack) if m is not None), None)
            if module != caller:
                arrow = f"{caller} -> {module}"
                if module not in walk.visits:
                    walk.visits.append(module)
                    arrows.add(arrow)
                elif arrow not in arrows:
                    arrows.add(arrow)
                    walk.returns.append(arrow)
        stack.append(module)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = fn()
    finally:
        sys.setprofile(previous)
    return result, walk
