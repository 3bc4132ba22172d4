"""Signing keys (docs/audit-seal.md#keys): SIGNING_KEYS, the generated default, the JWKS."""

from __future__ import annotations

import json
import logging
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.test import Client, override_settings

from dispatch import signing
from protocols.auditseal import b64url, public_keys_from_jwks

SEED = bytes(range(32))
KEYS = json.dumps([{"kid": "k2", "private": b64url(SEED)},
                   {"kid": "k1", "private": b64url(bytes(32))}])


@pytest.fixture(autouse=True)
def _fresh_keys() -> Iterator[None]:
    signing.signing_keys.cache_clear()
    yield
    signing.signing_keys.cache_clear()


def test_signing_keys_from_the_environment_first_is_current() -> None:
    with override_settings(SIGNING_KEYS=KEYS):
        assert [k.kid for k in signing.signing_keys()] == ["k2", "k1"]
        message = b"hello"
        signature = signing.current_key().private.sign(message)
        Ed25519PrivateKey.from_private_bytes(SEED).public_key().verify(signature, message)


@pytest.mark.parametrize("bad", ["[]", '[{"kid": "a", "private": "AAAA"}]',
                                 json.dumps([{"kid": "a", "private": b64url(SEED)}] * 2)])
def test_bad_signing_keys_are_refused(bad: str) -> None:
    with override_settings(SIGNING_KEYS=bad), pytest.raises(ValueError):
        signing.signing_keys()


def test_default_key_is_generated_once_mode_0600_and_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with override_settings(SIGNING_KEYS="", VAR_DIR=tmp_path), caplog.at_level(logging.WARNING):
        first = signing.signing_keys()[0]
        signing.signing_keys.cache_clear()
        again = signing.signing_keys()[0]
    path = tmp_path / signing.KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.kid == again.kid
    assert len([r for r in caplog.records if "generated" in r.getMessage()]) == 1


@pytest.mark.django_db
def test_keys_endpoint_answers_the_public_jwks_without_a_token() -> None:
    with override_settings(SIGNING_KEYS=KEYS):
        response = Client().get("/api/v1/keys/")
    assert response.status_code == 200
    body = response.json()
    assert [k["kid"] for k in body["keys"]] == ["k2", "k1"]
    for entry in body["keys"]:
        assert entry["kty"] == "OKP" and entry["crv"] == "Ed25519" and entry["use"] == "sig"
        assert "d" not in entry
    public = public_keys_from_jwks(body)["k2"]
    public.verify(Ed25519PrivateKey.from_private_bytes(SEED).sign(b"x"), b"x")
