"""The database cache table of `settings.CACHES` (the login throttle's `shared` store).

`migrate` creates it, so the zero-install default (`scripts/run.sh`, docker-compose) needs no
separate `createcachetable`. Nothing happens when `CACHE_URL` points the cache at Redis; after
renaming the table, run `manage.py createcachetable`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.db import migrations


def create_cache_tables(apps: Any, schema_editor: Any) -> None:
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


def drop_cache_tables(apps: Any, schema_editor: Any) -> None:
    for cache in settings.CACHES.values():
        if cache["BACKEND"] == "django.core.cache.backends.db.DatabaseCache":
            table = schema_editor.quote_name(cache["LOCATION"])
            schema_editor.execute(f"DROP TABLE IF EXISTS {table}")


class Migration(migrations.Migration):
    dependencies: list[tuple[str, str]] = []
    operations = [migrations.RunPython(create_cache_tables, drop_cache_tables)]
