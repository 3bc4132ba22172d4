"""Approval rules are checked at start-up against the registered contracts
(docs/design.md#approval-policies): a rule naming an unknown operation or argument, a value that
does not parse, or an amount rule without its currency is an error of `manage.py check`, naming
the rule, and no process starts on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tests.support.caps import deploy

ROOT = Path(__file__).resolve().parents[2]

EUR = {"currency": {"eq": "EUR"}}
GOOD = {"operation": "payments.transfer", "when": {"amount": {"gte": "10000.00"}, **EUR},
        "quorum": 2}
WRONG = [
    ({**GOOD, "operation": "payments.transfr"}, "no registered contract"),
    ({**GOOD, "when": {"amout": {"gte": "10000.00"}, **EUR}}, "'amout'"),
    ({**GOOD, "when": {"amount": {"gte": "ten thousand"}, **EUR}}, "is not a decimal"),
    ({**GOOD, "when": {"amount": {"gte": "10000.00"}, "currency": {"eq": "eur"}}},
     "'eur'"),
    ({**GOOD, "when": {"amount": {"gte": "10000.00"}}}, "currency"),
    ({"operation": "payments.transfer",
      "cap": {"argument": "amount", "sum": "50000.00", "per": "day", "scope": "agent"}},
     "currency"),
    ({"operation": "payments.transfer", "when": EUR,
      "cap": {"argument": "amuont", "sum": "50000.00", "per": "day", "scope": "agent"}},
     "'amuont'"),
]


@pytest.mark.parametrize(("rule", "says"), WRONG)
def test_a_rule_that_would_never_apply_is_a_check_error(
    settings: Any, rule: dict[str, Any], says: str,
) -> None:
    try:
        deploy(settings, [GOOD, rule])
        with pytest.raises(SystemCheckError) as error:
            call_command("check")
        message = str(error.value)
        assert "dispatch.E010" in message
        assert f"APPROVAL_RULES[1] ({rule['operation']})" in message
        assert says in message
        # The runtime every process builds refuses it too.
        with pytest.raises(ImproperlyConfigured, match=r"APPROVAL_RULES\[1\]"):
            from dispatch.runtime import get_runtime

            get_runtime()
    finally:
        deploy(settings, [])


def test_the_deployed_rules_pass_the_check(settings: Any) -> None:
    try:
        deploy(settings, [GOOD, json.loads((ROOT / "demo" / "approval_rules.json").read_text())[0]])
        call_command("check")
    finally:
        deploy(settings, [])


def child(*argv: str, rules: Any) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings",
           "APPROVAL_RULES": json.dumps(rules), "PYTHONPATH": f"{ROOT}:{ROOT / 'clients/python'}"}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


MISSPELT = [{**GOOD, "operation": "payments.transfr"}]


def test_manage_py_check_names_the_misspelt_rule() -> None:
    result = child("manage.py", "check", rules=MISSPELT)
    assert result.returncode == 1, result.stdout
    assert "dispatch.E010" in result.stderr
    assert "APPROVAL_RULES[0] (payments.transfr)" in result.stderr


@pytest.mark.parametrize("entry", ["config.wsgi", "config.asgi"])
def test_the_web_process_refuses_to_start(entry: str) -> None:
    result = child("-c", f"import {entry}", rules=MISSPELT)
    assert result.returncode != 0
    assert "ApprovalRulesError" in result.stderr  # an ImproperlyConfigured
    assert "APPROVAL_RULES[0] (payments.transfr)" in result.stderr
    assert child("-c", f"import {entry}", rules=[GOOD]).returncode == 0


def test_the_worker_refuses_to_start(tmp_path: Path) -> None:
    result = child("-m", "celery", "-A", "config", "worker", "--pool", "solo",
                   "--without-mingle", "--without-gossip", "--loglevel", "WARNING",
                   rules=MISSPELT)
    assert result.returncode != 0
    assert "APPROVAL_RULES[0] (payments.transfr)" in result.stderr
