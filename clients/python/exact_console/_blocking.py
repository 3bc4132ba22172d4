"""A sync `Client`'s call made from async code, on a thread of its own.

asyncio's default executor (`asyncio.to_thread`, `run_in_executor(None, ...)`) is a small
pool shared by the whole process: a tool call waiting ten minutes for a human there holds one
of its threads all that time, and a few such calls stall everything else that uses it (DNS
lookups included). A call here gets a daemon thread that ends with it, and the event loop
awaits its result; the number of threads is the number of calls in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


async def in_thread(function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)` on a new thread, awaited."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return  # the awaiting task was cancelled: nobody reads the result
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]  # T when no error

    def run() -> None:
        try:
            result: T | None = function(*args, **kwargs)
            error: BaseException | None = None
        except BaseException as failed:  # handed to the awaiting task
            result, error = None, failed
        # A loop closed meanwhile raises RuntimeError: nobody awaits the result then.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="exact-console-call", daemon=True).start()
    return await done
