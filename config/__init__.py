"""Project configuration: settings, URLs, WSGI/ASGI and the Celery app."""

from __future__ import annotations

# The Celery app must load with Django, or tasks go to a default AMQP broker that is not there.
from config.celery import app as celery_app

__all__ = ["celery_app"]
