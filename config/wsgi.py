from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# The runtime now, not at the first request: a deployment it refuses (an approval rule that would
# never apply, docs/design.md#approval-policies) never serves. Imported once Django is set up.
from dispatch.runtime import get_runtime  # noqa: E402

get_runtime()
