from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.management.base import BaseCommand

from demo.destinations.runner import serve


class Command(BaseCommand):
    help = ("Run the SMTP sink and the fake bank in the foreground on the ports the settings "
            "name (SMTP_SINK_PORT, BANK_URL), with the publisher and the source server on the "
            "bank's port, keeping records in DESTINATIONS_DIR.")

    def handle(self, *args: Any, **opts: Any) -> None:
        cfg = settings.DESTINATIONS
        port = urlparse(cfg["bank_url"]).port or 80
        serve(cfg["dir"], smtp_port=int(cfg["smtp_port"]), bank_port=port)
