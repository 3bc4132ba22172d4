"""The hot path's fixed SQL (every statement declared in dispatch.store.sql) names the
tables and columns the models really have."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model

# Importing the services declares their statements (the derived ones when first built).
from dispatch.services import access, admission, approvals, claims, operations  # noqa: F401
from dispatch.store.sql import STATEMENTS

pytestmark = pytest.mark.django_db(databases=[])  # needs the app registry, not a database

# Ours, and the user model the approvers' addresses and a token's principal join.
MODELS = [*apps.get_app_config("dispatch").get_models(), get_user_model()]
TABLES = {model._meta.db_table for model in MODELS}
COLUMNS = {field.column for model in MODELS for field in model._meta.concrete_fields}
# The aliases and names the statements give their own parts (CTEs, counts, a recursive chain).
OWN_NAMES = {"excluded"}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_every_identifier_is_a_table_or_a_column(name: str) -> None:
    for identifier in re.findall(r'"([a-z_]+)"', STATEMENTS[name].sql):
        assert identifier in TABLES or identifier in COLUMNS or identifier in OWN_NAMES, (
            name, identifier)


def test_the_hot_statements_are_declared() -> None:
    assert {"operation.insert", "operation.move", "attempt.end", "attempt.start_guard",
            "operation.hold", "attempt.insert", "permit.claim", "proposal.lock_uncancelled",
            "audit.insert", "approval.move", "approval.lock", "claim.permit",
            "claim.uncancelled", "operation.move_and_end", "attempt.start"} <= set(STATEMENTS)


def test_the_tables_are_djangos_default_names() -> None:
    assert get_user_model()._meta.db_table == "auth_user"
    for model in MODELS[:-1]:
        assert model._meta.db_table == f"dispatch_{model._meta.model_name}"
