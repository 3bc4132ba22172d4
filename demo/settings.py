"""The demo's settings (docs/design.md#demo, #evidence), read from the environment as the project's
are.

`config.settings` takes them only when the demo extension is installed
(`DISPATCH_EXTENSIONS` names `demo.extension`): the runtime and the console read none of them.
Django-free, like the package: the settings module imports it before Django is set up.

- `DESTINATIONS`: the demo's destinations, outside the dispatcher's database, every address
  from the environment (a worker on another machine reaches them there):
  `SMTP_SINK_HOST` and `SMTP_SINK_PORT` (where email is sent), `SMTP_SINK_LOOKUP_URL` (the
  sink's HTTP lookup beside its SMTP port, which reconciliation asks: never its folder),
  `BANK_URL`, `PUBLISHER_URL` and `SOURCES_URL` (the publisher and the source server share the
  bank's HTTP server by default; a source's URL is `{sources_url}/{name}`). Only
  `run_destinations` reads `DESTINATIONS_DIR` (their files) and `DESTINATIONS_BIND` (the address
  its servers listen on: 127.0.0.1, or 0.0.0.0 in a container other containers reach).
- `EVIDENCE_SOURCE_ALLOWLIST`: the URL prefixes a fetch may read (comma-separated); empty:
  the demo source server only (`demo.hooks.source_allowlist`). Part of the fetch's destination
  fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import environ


def demo_destinations(env: environ.Env, var_dir: Path) -> dict[str, Any]:
    bank_url = env.str("BANK_URL", default="http://127.0.0.1:8026")
    return {
        "dir": str(Path(env.str("DESTINATIONS_DIR", default=str(var_dir / "destinations")))),
        "bind": env.str("DESTINATIONS_BIND", default="127.0.0.1"),
        "smtp_host": env.str("SMTP_SINK_HOST", default="127.0.0.1"),
        "smtp_port": env.int("SMTP_SINK_PORT", default=8025),
        "smtp_lookup_url": env.str("SMTP_SINK_LOOKUP_URL", default="http://127.0.0.1:8027"),
        "bank_url": bank_url,
        "publisher_url": env.str("PUBLISHER_URL", default=bank_url),
        "sources_url": env.str("SOURCES_URL", default=f"{bank_url.rstrip('/')}/sources"),
    }


def demo_source_allowlist(env: environ.Env) -> list[str]:
    return list(env.list("EVIDENCE_SOURCE_ALLOWLIST", default=[]))
