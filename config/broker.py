"""The embedded broker (`CELERY_BROKER_URL=filesystem://`, the zero-install default): kombu's
filesystem transport, with each message written whole before any consumer can see it.

kombu's own `_put` creates `<time>_<uuid>.<queue>.msg` in the queue folder and then writes the
payload under an advisory lock that its `_get` never takes: a worker polling at that moment moves
the still-empty file away and dies on it ("Unrecoverable error: JSONDecodeError"), and the task
is lost. Here the payload goes to a `.part` name that no queue matches, is flushed to disk, and
is renamed into place, which POSIX makes atomic: a consumer sees the whole message or nothing.
`register()` makes the `filesystem://` URL name it.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        partial = f"{final}.part"  # `.<queue>.msg.part`: no consumer of any queue takes it
        try:
            with open(partial, "wb") as out:
                out.write(str_to_bytes(dumps(payload)))
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def register() -> None:
    """Make `filesystem://` name this transport in every process that imports the Celery app
    (config/celery.py), whatever its URL came from; a `redis://` URL is left alone."""
    TRANSPORT_ALIASES["filesystem"] = f"{__name__}:Transport"
