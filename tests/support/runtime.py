"""A re-registered `email.send` handler: the same behaviour in other code, so another
fingerprint (derived from the code: this module is part of it).

The fixtures that install it (`changed_handler`) or narrow deployment policy (`policy`) are
in tests/conftest.py.
"""

from __future__ import annotations

from demo.handlers import EmailSendHandler


class ChangedEmailSendHandler(EmailSendHandler):
    """Sends as the demo's handler does; its code is this module's as well."""
