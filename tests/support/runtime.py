"""A re-registered `email.send` handler: the same code under another fingerprint.

The fixtures that install it (`changed_handler`) or narrow deployment policy (`policy`) are
in tests/conftest.py.
"""

from __future__ import annotations

from demo.handlers import EmailSendHandler


class ChangedEmailSendHandler(EmailSendHandler):
    implementation_fingerprint = "email.send/smtp-sink@2"
