"""Implementation fingerprints come from the handler's code, and handlers are kept by name and
version (docs/design.md#outcomes, #extensions): registering v2 never replaces the handler a pending
v1 action runs."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from demo.contracts import email_send
from demo.handlers import EmailSendHandler
from dispatch.handlers import code_fingerprint
from dispatch.runtime import Runtime
from protocols.contracts import ContractRegistry
from protocols.grants import Policy
from tests.support.runtime import ChangedEmailSendHandler

ROOT = Path(__file__).resolve().parents[2]

HANDLER_SOURCE = '''
from demo.handlers import EmailSendHandler


def helper():
    return {version!r}


class Sender(EmailSendHandler):
    pass
'''


EMAIL_CLIENTS = ("demo.destinations.smtp_client", "demo.destinations.smtp_sink")


def test_the_fingerprint_is_derived_from_the_code() -> None:
    fingerprint = code_fingerprint(EmailSendHandler, EMAIL_CLIENTS)
    assert fingerprint.startswith("sha256:")
    assert EmailSendHandler.implementation_fingerprint == fingerprint
    assert EmailSendHandler().implementation_fingerprint == fingerprint
    # The destination client it names is part of it: where "no effect" is decided.
    assert code_fingerprint(EmailSendHandler) != fingerprint
    # Same behaviour, other code (a subclass in another module): another fingerprint.
    assert ChangedEmailSendHandler.implementation_fingerprint != fingerprint


FINGERPRINT_OF = (
    "import sys; sys.path.insert(0, sys.argv[1]); import django; django.setup(); "
    "import edited_handler; print(edited_handler.Sender.implementation_fingerprint)"
)


def fingerprint_in_a_new_process(folder: Path, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    done = subprocess.run([sys.executable, "-c", FINGERPRINT_OF, str(folder)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip().splitlines()[-1]


def test_an_edit_of_the_handlers_module_is_a_new_fingerprint_in_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Even an edit of a helper beside the class; and two processes (another working
    directory) agree on the same code, as the web process and the worker must. A process
    keeps the fingerprint of the code it imported, whatever the file says later."""
    folder = tmp_path / "code"
    folder.mkdir()
    module = folder / "edited_handler.py"
    module.write_text(HANDLER_SOURCE.format(version=1))
    first = fingerprint_in_a_new_process(folder, cwd=ROOT)
    assert fingerprint_in_a_new_process(folder, cwd=tmp_path) == first
    monkeypatch.syspath_prepend(str(folder))
    imported = importlib.import_module("edited_handler")
    try:
        assert imported.Sender.implementation_fingerprint == first
        module.write_text(HANDLER_SOURCE.format(version=2))
        assert fingerprint_in_a_new_process(folder, cwd=ROOT) != first
        assert imported.Sender.implementation_fingerprint == first  # what this process runs
    finally:
        sys.modules.pop("edited_handler", None)


def fresh_runtime() -> Runtime:
    return Runtime(registry=ContractRegistry(), handlers={},
                   policy=Policy(allowed_effects=frozenset({"external_write"})))


def test_registering_v2_keeps_v1s_handler_for_v1() -> None:
    runtime = fresh_runtime()
    v1_handler, v2_handler = EmailSendHandler(), ChangedEmailSendHandler()
    v1 = runtime.register(email_send(v1_handler.implementation_fingerprint), v1_handler)
    v2 = runtime.register(replace(email_send(v2_handler.implementation_fingerprint),
                                  contract_version=2), v2_handler)
    assert runtime.handler(v1) is v1_handler
    assert runtime.handler(v2) is v2_handler
    assert runtime.contract("email.send") is v2  # new proposals: the newest version
    # A proposal made under v1 is served by v1 while it is registered.
    assert runtime.contract_for("email.send", v1.fingerprint) is v1
    assert runtime.contract_for("email.send", "sha256:gone") is v2
    assert runtime.contract_for("email.send", v2.fingerprint) is v2


def test_a_handler_whose_code_is_not_the_contracts_is_refused() -> None:
    runtime = fresh_runtime()
    contract = email_send(EmailSendHandler.implementation_fingerprint)
    with pytest.raises(ValueError, match="fingerprint differs"):
        runtime.register(contract, ChangedEmailSendHandler())
