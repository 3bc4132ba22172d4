"""The email client: one message over SMTP, every failure classified as definite or uncertain."""

from __future__ import annotations

import contextlib
import re
import smtplib
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.policy import SMTPUTF8 as SMTPUTF8_POLICY
from email.utils import formatdate
from typing import Any
from urllib.parse import quote

from dispatch.handlers import DefiniteFailure, UncertainOutcome
from protocols.addresses import AddressError, parse_mailbox

from .http_client import get_keyed

__all__ = ["send_email", "sink_lookup"]

# The client's own name in EHLO; fixed so that no reverse-DNS lookup (socket.getfqdn) happens.
_LOCAL_HOSTNAME = "dispatch.localhost"
_PERIOD_AT_LINE_START = re.compile(rb"(?m)^\.")
# C0 controls but the tab, DEL and C1 controls: none belongs in a header line (RFC 5322 §2.2).
# The email package refuses a line break inside a value but keeps a trailing CR or LF, which
# would end the header early.
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_MAIL_OK = 250
_RCPT_OK = frozenset({250, 251})
_START_MAIL_INPUT = 354
_UNPARSEABLE = -1  # smtplib's code for a reply that does not start with a number
_SUCCESS = range(200, 300)


def _is_ascii(*values: str) -> bool:
    """Return whether every value is plain ASCII."""
    return all(value.isascii() for value in values)


def _check_headers(
    *, message_id: str, sender: str, to: list[str], cc: list[str], subject: str
) -> None:
    """Refuse header injection: every address one plain mailbox, no control character in a
    header value. The header and the envelope then name the same single mailbox each."""
    for role, address in [("sender", sender), *(("recipient", a) for a in [*to, *cc])]:
        if not isinstance(address, str):
            raise TypeError(f"{role} must be a string, not {type(address).__name__}")
        try:
            parse_mailbox(address)
        except AddressError as error:
            raise ValueError(f"{role} {address!r} {error}") from None
    for name, value in (("Message-ID", message_id), ("Subject", subject)):
        if _HEADER_CONTROL.search(value):
            raise ValueError(f"{name} {value!r} contains a control character")


def _render(
    *, message_id: str, sender: str, to: list[str], cc: list[str], subject: str, body: str
) -> bytes:
    """Render the message as CRLF bytes, dot-stuffed and terminated for the DATA phase.

    The body travels base64-encoded, so it round-trips exactly (line endings, trailing newline
    and non-ASCII text included) through any 7-bit path.
    """
    policy = SMTP_POLICY if _is_ascii(sender, *to, *cc) else SMTPUTF8_POLICY
    message = EmailMessage(policy=policy)
    message["Message-ID"] = f"<{message_id.strip().strip('<>')}>"
    message["Date"] = formatdate(usegmt=True)
    message["From"] = sender
    message["To"] = ", ".join(to)
    if cc:
        message["Cc"] = ", ".join(cc)
    message["Subject"] = subject
    message.set_content(
        body.encode("utf-8"),
        maintype="text",
        subtype="plain",
        cte="base64",
        params={"charset": "utf-8"},
    )
    data = _PERIOD_AT_LINE_START.sub(b"..", message.as_bytes(policy=policy))
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data + b".\r\n"


def _open_transaction(
    smtp: smtplib.SMTP, *, sender: str, recipients: list[str], international: bool
) -> None:
    """Run EHLO, MAIL, every RCPT and the DATA command, up to the server's 354.

    Raises :class:`DefiniteFailure` on any refusal: nothing of the message has been sent yet.
    Transport errors propagate to the caller, which classifies them the same way.
    """
    smtp.ehlo_or_helo_if_needed()
    options: list[str] = []
    if international:
        if not smtp.has_extn("smtputf8"):
            raise DefiniteFailure("non-ASCII addresses need SMTPUTF8, which the server lacks")
        options = ["SMTPUTF8", "BODY=8BITMIME"]
    code, reply = smtp.mail(sender, options)
    if code != _MAIL_OK:
        raise DefiniteFailure(f"MAIL FROM refused: {code} {reply!r}")
    refused = {}
    for recipient in recipients:
        code, reply = smtp.rcpt(recipient)
        if code not in _RCPT_OK:
            refused[recipient] = (code, reply)
    if refused:
        # Never send DATA with a partial recipient list: either all recipients or none.
        raise DefiniteFailure(f"recipients refused at RCPT: {refused!r}")
    smtp.putcmd("data")
    code, reply = smtp.getreply()
    if code != _START_MAIL_INPUT:
        raise DefiniteFailure(f"DATA refused: {code} {reply!r}")


def send_email(
    host: str,
    port: int,
    *,
    message_id: str,
    sender: str,
    to: list[str],
    cc: list[str],
    subject: str,
    body: str,
    timeout: float,
) -> None:
    """Deliver one message to ``host:port`` over SMTP; return only on a 2xx after the content.

    ``message_id`` becomes the ``Message-ID`` header (angle brackets added), which is what the
    sink's lookup searches for. ``timeout`` bounds the connect and every single socket wait.

    Classification, by where the failure happens:

    - Before any byte of the message content is sent, every failure is a
      :class:`DefiniteFailure` -- the server cannot hold a message it never received: invalid
      arguments (no recipients, an address that is not one plain mailbox, a control character
      in a header value), connection refused or unreachable, a timeout
      while connecting or waiting for a reply (``socket.timeout`` is an ``OSError``, and
      ``smtplib`` turns errors while reading a reply into ``SMTPServerDisconnected``), a non-220
      greeting (``SMTPConnectError``), EHLO/HELO refused (``SMTPHeloError``), a disconnect,
      MAIL FROM not answered 250, *any* recipient refused at RCPT (5xx or 4xx; ``DATA`` is then
      never sent, so a partial delivery cannot happen), or ``DATA`` not answered 354.
    - Once the content is being sent, every failure is an :class:`UncertainOutcome`: an error
      while sending it (conservatively, although an interrupted send cannot have delivered the
      terminating ``<CRLF>.<CRLF>``), a timeout or disconnect while awaiting the reply to the
      end of ``DATA``, an over-long reply (``SMTPResponseException``), an unparseable reply
      (``smtplib`` reports code -1), and any non-2xx reply. RFC 5321 would make a 5xx there a
      rejection, but a destination may store before it fails, and an uncertain outcome only
      costs a lookup, while a wrongly definite one could duplicate an effect.
    - After a 2xx reply the message was accepted; errors during ``QUIT`` are ignored.
    """
    recipients = [*to, *cc]
    if not recipients:
        raise DefiniteFailure("no recipients")
    try:
        _check_headers(message_id=message_id, sender=sender, to=to, cc=cc, subject=subject)
        payload = _render(
            message_id=message_id, sender=sender, to=to, cc=cc, subject=subject, body=body
        )
    except (ValueError, TypeError) as error:
        raise DefiniteFailure(f"invalid message: {error}") from error

    try:
        smtp = smtplib.SMTP(host, port, local_hostname=_LOCAL_HOSTNAME, timeout=timeout)
    except (OSError, smtplib.SMTPException) as error:
        raise DefiniteFailure(f"could not connect to {host}:{port}: {error!r}") from error

    try:
        try:
            _open_transaction(
                smtp,
                sender=sender,
                recipients=recipients,
                international=not _is_ascii(sender, *recipients),
            )
        except (OSError, smtplib.SMTPException, UnicodeError) as error:
            raise DefiniteFailure(f"failed before the message was sent: {error!r}") from error

        # From here on the server may have received the whole message.
        try:
            smtp.send(payload)
            code, reply = smtp.getreply()
        except (OSError, smtplib.SMTPException) as error:
            raise UncertainOutcome(f"no reply after the message was sent: {error!r}") from error
        if code == _UNPARSEABLE:
            raise UncertainOutcome(f"unparseable reply after the message was sent: {reply!r}")
        if code not in _SUCCESS:
            raise UncertainOutcome(f"reply {code} {reply!r} after the message was sent")

        # The message was accepted; a failed goodbye changes nothing.
        with contextlib.suppress(OSError, smtplib.SMTPException):
            smtp.quit()
    finally:
        smtp.close()


def sink_lookup(base_url: str, message_id: str, *, timeout: float) -> dict[str, Any] | None:
    """Ask the SMTP sink's HTTP lookup at ``base_url`` for the first stored delivery of
    ``message_id`` (brackets optional); ``None`` when it holds none.

    Raises :class:`LookupFailedError` when the sink gives no usable answer (unreachable,
    timeout, a status other than 200/404, a 200 without a JSON object); that settles nothing.
    """
    bare = message_id.strip().strip("<>").strip()
    return get_keyed(base_url, f"/messages/{quote(bare, safe='')}", timeout=timeout,
                     destination="smtp_sink")
