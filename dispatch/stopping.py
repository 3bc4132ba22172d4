"""How a long-running command stops: SIGTERM (what `docker stop` and Kubernetes send) or SIGINT.

Python installs no handler for SIGTERM, and a process without a handler that is PID 1 of its PID
namespace (a container's command) is deaf to it: the kernel drops the signal, and the engine
kills the process with SIGKILL after its grace period. `stop_signals()` installs a handler for
both, so such a command stops cleanly wherever it runs:

- The first signal sets the returned event. A command waits on it between units of work
  (`stop.wait(seconds)` instead of `time.sleep`) and finishes the unit it is in: its exit is
  status 0, at once when it was waiting.
- A second signal abandons the unit: it raises `KeyboardInterrupt` in the main thread, so that
  every open transaction rolls back and every `with` block (a lease) is left; the command exits
  non-zero.

The previous handlers are restored when the block ends. Signal handlers belong to the main
thread: elsewhere nothing is installed and the event is only set by the caller.

A process asked to stop leaves its heap to the operating system: the interpreter's collections
at exit took 2.1 s of the MCP gateway's exit on a loaded 2-core machine, 0.3 s with the heap
frozen (`gc.freeze()`); nothing left in it holds a transaction or a lease by then.
"""

from __future__ import annotations

import gc
import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_signals() -> Iterator[threading.Event]:
    """SIGTERM and SIGINT set the event yielded; a second one raises `KeyboardInterrupt`."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request_stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            logger.warning("%s again: abandoning the current work", name)
            raise KeyboardInterrupt(name)
        logger.info("%s: stopping after the current work", name)
        stop.set()

    previous = {signum: signal.signal(signum, request_stop) for signum in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if stop.is_set():
            gc.freeze()
