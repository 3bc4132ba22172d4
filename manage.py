#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from dispatch.audit_offline import main as verify_offline
    from dispatch.audit_offline import wanted

    if wanted(sys.argv[1:]):  # reads no database and no settings: Django stays out of it
        sys.exit(verify_offline(sys.argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
