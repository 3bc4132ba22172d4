"""The image installs from a hash-locked list (requirements/image.txt, scripts/lock_image.sh):
every package it needs, each at the version constraints.txt pins, each with the hashes of its
files, and nothing else; the Dockerfile makes pip refuse anything unhashed."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements" / "image.txt"
#: What the image installs: each project with the extras it is installed with (Dockerfile).
PROJECTS = ((ROOT / "pyproject.toml", {"demo"}),
            (ROOT / "clients" / "python" / "pyproject.toml", {"permits"}))
#: Installed from the lock besides the projects' dependencies: their build backend.
BUILD = {"setuptools"}


def pins(text: str) -> dict[str, str]:
    return {canonicalize_name(name): version
            for name, version in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)", text, re.MULTILINE)}


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of each entry of the lock."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        head = re.match(r"([A-Za-z0-9_.\-]+)==(\S+)", block)
        if head:
            entries[canonicalize_name(head.group(1))] = (
                head.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return entries


def needed() -> set[str]:
    """Every distribution the projects need with their extras, on this Python (the image's,
    3.11 on Linux), walked through the installed distributions' own metadata."""
    found: set[str] = set()
    todo: list[tuple[Requirement, set[str]]] = []
    for path, extras in PROJECTS:
        project = tomllib.loads(path.read_text())["project"]
        todo += [(Requirement(r), set()) for r in project.get("dependencies", [])]
        for extra in extras:
            todo += [(Requirement(r), {extra})
                     for r in project["optional-dependencies"][extra]]
    while todo:
        requirement, context = todo.pop()
        environment = {**default_environment(), "extra": ""}
        if requirement.marker and not any(
                requirement.marker.evaluate({**environment, "extra": extra})
                for extra in (context or {""})):
            continue
        name = canonicalize_name(requirement.name)
        wanted = set(requirement.extras)
        key = name + "[" + ",".join(sorted(wanted)) + "]"
        if key in found:
            continue
        found.add(key)
        for text in metadata.distribution(name).requires or []:
            todo.append((Requirement(text), wanted))
    return {key.split("[")[0] for key in found}


def test_the_lock_pins_what_constraints_pin_each_with_hashes() -> None:
    constraints = pins((ROOT / "constraints.txt").read_text())
    entries = locked()
    assert entries, LOCK
    for name, (version, hashes) in entries.items():
        assert constraints.get(name) == version, (
            f"{name}=={version} in requirements/image.txt, {constraints.get(name)} in "
            "constraints.txt: run scripts/lock_image.sh")
        assert hashes, f"{name} has no hash"


def test_the_lock_holds_exactly_what_the_image_needs() -> None:
    want = needed() | BUILD
    have = set(locked())
    assert not want - have, f"missing from the lock (scripts/lock_image.sh): {want - have}"
    assert not have - want, f"in the lock, needed by nothing: {have - want}"
    # The demo extension's packages are there: the compose stack runs the demo.
    assert {"aiosmtpd", "babel"} <= have


def test_the_image_installs_with_hashes_required_and_nothing_from_the_index_after() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    runs = re.findall(r"^RUN (.+?)(?<!\\)$", dockerfile, re.MULTILINE | re.DOTALL)
    installs = [run for run in runs if "pip install" in run]
    assert len(installs) == 2, installs
    locked_install, own_install = installs
    assert "--require-hashes" in locked_install and "-r requirements/image.txt" in locked_install
    # The projects themselves: no dependency resolved, no index asked, no build environment
    # downloaded (their build backend is in the lock).
    for flag in ("--no-deps", "--no-index", "--no-build-isolation"):
        assert flag in own_install, flag
    assert "pip check" in own_install
    assert "COPY requirements/image.txt" in dockerfile
