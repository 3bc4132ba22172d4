"""Children that stop at a named failpoint until the test lets them go (dispatch.failpoints),
so a test can force the interleaving of a race across OS processes, on the real database.

    with PausedChild(tmp_path, "execute", operation.id, pause="attempt.before_outcome") as a:
        a.reached()        # the child is at the point, nothing after it has happened
        ...                # the other side of the race, in this process or another child
        a.release()
        result = a.result()  # what the child printed as JSON
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.processes import ROOT, child_env


class PausedChild:
    def __init__(self, folder: Path, action: str, *args: str, pause: str, **env: str) -> None:
        self.folder = folder / f"{action}-{pause}-{time.monotonic_ns()}"
        self.folder.mkdir(parents=True)
        self.pause = pause
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.child", action, *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=child_env(DISPATCH_PAUSE_AT=pause, DISPATCH_PAUSE_DIR=str(self.folder),
                          DISPATCH_PAUSE_TIMEOUT="120", **env))

    def __enter__(self) -> PausedChild:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def reached(self, timeout: float = 60) -> None:
        """Wait until the child stands at its failpoint (fail if it ended or never came)."""
        marker = self.folder / f"{self.pause}.reached"
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if self.proc.poll() is not None:
                out, err = self.proc.communicate()
                raise AssertionError(f"child ended before {self.pause}: {out}\n{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"child never reached {self.pause}")
            time.sleep(0.01)

    def release(self) -> None:
        (self.folder / f"{self.pause}.go").touch()

    def result(self, timeout: float = 60) -> Any:
        """Release the child if it is still held, wait for it, and return its JSON answer."""
        self.release()
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"child failed: {out}\n{err}"
        return json.loads(out.strip().splitlines()[-1])
