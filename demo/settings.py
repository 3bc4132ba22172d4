"""The demo's settings (docs/design.md#demo, #evidence), read from the environment as the project's
are.

`config.settings` takes them only when the demo extension is installed
(`DISPATCH_EXTENSIONS` names `demo.extension`): the runtime and the console read none of them.
Django-free, like the package: the settings module imports it before Django is set up.

- `DESTINATIONS`: the demo's loopback destinations, outside the dispatcher's database:
  `DESTINATIONS_DIR` (their files), `SMTP_SINK_PORT`, `BANK_URL` (the bank; the publisher and
  the source server share its HTTP server, a source's URL is `{sources_url}/{name}`).
- `EVIDENCE_SOURCE_ALLOWLIST`: the URL prefixes a fetch may read (comma-separated); empty:
  the demo source server only (`demo.hooks.source_allowlist`). Part of the fetch's destination
  fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import environ


def demo_destinations(env: environ.Env, var_dir: Path) -> dict[str, Any]:
    destinations: dict[str, Any] = {
        "dir": str(Path(env.str("DESTINATIONS_DIR", default=str(var_dir / "destinations")))),
        "smtp_host": "127.0.0.1",
        "smtp_port": env.int("SMTP_SINK_PORT", default=8025),
        "bank_url": env.str("BANK_URL", default="http://127.0.0.1:8026"),
    }
    destinations["publisher_url"] = destinations["bank_url"]
    destinations["sources_url"] = f"{str(destinations['bank_url']).rstrip('/')}/sources"
    return destinations


def demo_source_allowlist(env: environ.Env) -> list[str]:
    return list(env.list("EVIDENCE_SOURCE_ALLOWLIST", default=[]))
