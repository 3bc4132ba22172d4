"""The failpoints' effects, for the test settings only (`FAILPOINTS` in config/test_settings.py;
dispatch/failpoints.py names the points). Each is chosen by the environment of the process under
test, read when the point is reached:

- `DISPATCH_CRASH_AT=<name>`: the process kills itself with SIGKILL at that point: no cleanup,
  no rollback handlers, exactly like a crash.
- `DISPATCH_PAUSE_AT=<name>[,<name>…]` with `DISPATCH_PAUSE_DIR=<dir>`: at that point the
  process writes `<dir>/<name>.reached` and waits until `<dir>/<name>.go` exists, so that a test
  in another process can force an interleaving (a stale attempt answering after a newer one
  started, a revocation committing between a check and a claim). It waits at most
  `DISPATCH_PAUSE_TIMEOUT` seconds (default 60), then goes on.
- `DISPATCH_TAMPER_AT=<name>` with `DISPATCH_TAMPER_ARGUMENTS=<JSON object>`: at a payload point
  (`failpoint_payload`) the process replaces those members of the snapshot's arguments, as a
  compromised or buggy worker would alter the approved payload after the claim.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def reached(name: str) -> None:
    if os.environ.get("DISPATCH_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    paused = os.environ.get("DISPATCH_PAUSE_AT")
    if paused and name in paused.split(","):
        _pause(name)


def _pause(name: str) -> None:
    folder = Path(os.environ["DISPATCH_PAUSE_DIR"])
    (folder / f"{name}.reached").write_text(str(os.getpid()))
    deadline = time.monotonic() + float(os.environ.get("DISPATCH_PAUSE_TIMEOUT", "60"))
    go = folder / f"{name}.go"
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def payload(name: str, snapshot: dict[str, Any]) -> dict[str, Any]:
    """`snapshot`, or a copy whose arguments `DISPATCH_TAMPER_ARGUMENTS` altered at `name`."""
    if os.environ.get("DISPATCH_TAMPER_AT") != name:
        return snapshot
    changes = json.loads(os.environ["DISPATCH_TAMPER_ARGUMENTS"])
    return {**snapshot, "arguments": {**snapshot["arguments"], **changes}}
